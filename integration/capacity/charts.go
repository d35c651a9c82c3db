package capacity

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Chart is one SVG figure: its file name, and the series drawn in it.
type Chart struct {
	File   string // the file name in the output directory
	Title  string
	XLabel string
	YLabel string
	LogY   bool // the x axis is always logarithmic
	Series []Series
}

// Series is one line of a Chart: an implementation (and a metric or a
// variant), in the order of the legend.
type Series struct {
	Name   string
	Impl   string
	Dashed bool
	Points plotter.XYs // sorted by x; points a log axis cannot show are left out
}

// Charts returns the four figures of issue 37 drawn from the report:
// throughput against acquires in flight (a), Lock+Unlock p50 and p99
// against held locks (b), handoff p99 against waiters (c), and the leader's
// CPU-seconds per minute against sessions, idle and with 10 watched locks
// each (d). A series with no point is left out; a chart without any is
// still returned, drawn empty, so that the set of files does not change.
func (r *Report) Charts() []Chart {
	return []Chart{
		{
			File: "throughput.svg", Title: "a. Throughput on distinct locks",
			XLabel: "acquires in flight (log scale)", YLabel: "grants per second",
			Series: r.series("a", "", []metricLine{{"grants_per_s", "", false}}, false),
		},
		{
			File: "held-locks-latency.svg", Title: "b. Lock+Unlock latency against held locks",
			XLabel: "held locks (log scale)", YLabel: "Lock+Unlock latency (ms)",
			Series: r.series("b", "", []metricLine{{"lock_unlock_p50_ms", "p50", false}, {"lock_unlock_p99_ms", "p99", true}}, false),
		},
		{
			File: "waiters-handoff.svg", Title: "c. Handoff p99 against waiters on one name",
			XLabel: "waiters (log scale)", YLabel: "handoff p99 (ms)",
			Series: r.series("c", "", []metricLine{{"handoff_p99_ms", "", false}}, false),
		},
		{
			File: "sessions-leader-cpu.svg", Title: "d. The etcd leader's CPU against sessions",
			XLabel: "sessions (log scale)", YLabel: "leader CPU-seconds per minute (log scale)", LogY: true,
			Series: append(
				r.series("d", "idle", []metricLine{{"leader_cpu_s_per_min", "idle", false}}, true),
				r.series("d", "watched10", []metricLine{{"leader_cpu_s_per_min", "watched10", true}}, true)...),
		},
	}
}

type metricLine struct {
	metric string
	suffix string // appended to the impl in the legend
	dashed bool
}

func (r *Report) series(id, variant string, lines []metricLine, logY bool) []Series {
	rows := r.rowsOf(id)
	var out []Series
	for _, impl := range impls() {
		for _, ml := range lines {
			s := Series{Name: impl, Impl: impl, Dashed: ml.dashed}
			if ml.suffix != "" {
				s.Name += " " + ml.suffix
			}
			for _, row := range rows {
				v, ok := row.Metrics[ml.metric]
				if row.Impl != impl || row.Variant != variant || !ok || (logY && v <= 0) {
					continue
				}
				s.Points = append(s.Points, plotter.XY{X: row.Load, Y: v})
			}
			if len(s.Points) > 0 {
				out = append(out, s)
			}
		}
	}
	return out
}

// Chart sizes.
const (
	chartWidth  = 18 * vg.Centimeter
	chartHeight = 10 * vg.Centimeter
)

// SVG draws the chart.
func (c Chart) SVG() ([]byte, error) { return c.render("svg") }

// render draws the chart in a format plot.WriterTo knows.
func (c Chart) render(format string) ([]byte, error) {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.X.Scale = plot.LogScale{}
	var loads []float64
	for _, s := range c.Series {
		for _, pt := range s.Points {
			loads = append(loads, pt.X)
		}
	}
	slices.Sort(loads)
	p.X.Tick.Marker = loadTicks(slices.Compact(loads))
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	leg := plot.NewLegend() // drawn right of the frame, where no line runs
	leg.Top, leg.Left = true, true

	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, pt := range s.Points {
			xmin, xmax = min(xmin, pt.X), max(xmax, pt.X)
			ymin, ymax = min(ymin, pt.Y), max(ymax, pt.Y)
		}
		l, pts, err := plotter.NewLinePoints(s.Points)
		if err != nil {
			return nil, fmt.Errorf("capacity: chart %s: series %s: %w", c.File, s.Name, err)
		}
		col := implColor(s.Impl)
		l.Color, l.Width = col, vg.Points(1.5)
		if s.Dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		pts.Color, pts.Shape = col, draw.CircleGlyph{}
		p.Add(l, pts)
		leg.Add(s.Name, l, pts)
	}
	if math.IsInf(xmin, 1) { // no data: an empty frame the scales can draw
		p.Title.Text += " (no data in this run)"
		xmin, xmax, ymin, ymax = 1, 10, 1, 10
	}
	p.X.Min, p.X.Max = padLog(xmin, xmax)
	if c.LogY {
		p.Y.Min, p.Y.Max = padLog(ymin, ymax)
	} else {
		p.Y.Min, p.Y.Max = 0, ymax*1.1
		if ymax == 0 {
			p.Y.Max = 1
		}
	}
	cv, err := draw.NewFormattedCanvas(chartWidth, chartHeight, format)
	if err != nil {
		return nil, fmt.Errorf("capacity: chart %s: %w", c.File, err)
	}
	dc := draw.New(cv)
	gap := vg.Points(10)
	legW := leg.Rectangle(dc).Size().X + gap
	p.Draw(draw.Crop(dc, 0, -legW, 0, 0))
	leg.Draw(draw.Crop(dc, chartWidth-legW+gap/2, 0, 0, -3*gap))
	var buf bytes.Buffer
	if _, err := cv.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("capacity: chart %s: %w", c.File, err)
	}
	return buf.Bytes(), nil
}

// padLog widens [lo, hi] by a little on a log scale (and to a factor of 2
// each way when lo == hi), so that end points are not on the frame.
func padLog(lo, hi float64) (float64, float64) {
	if lo == hi {
		return lo / 2, hi * 2
	}
	return lo / 1.2, hi * 1.2
}

func implColor(impl string) color.Color {
	switch impl {
	case ImplDlock:
		return color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff} // blue
	case ImplConcurrency:
		return color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff} // orange
	}
	return color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff} // the limit: grey
}

// WriteCharts draws every chart into dir (created if missing) and returns
// the paths written, in order.
func (r *Report) WriteCharts(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("capacity: charts: %w", err)
	}
	var paths []string
	for _, c := range r.Charts() {
		svg, err := c.SVG()
		if err != nil {
			return paths, err
		}
		path := filepath.Join(dir, c.File)
		if err := os.WriteFile(path, svg, 0o644); err != nil {
			return paths, fmt.Errorf("capacity: charts: %w", err)
		}
		paths = append(paths, path)
	}
	return slices.Clip(paths), nil
}

// loadTicks labels the x axis at the loads measured, rather than at powers
// of ten only.
type loadTicks []float64

// Ticks implements plot.Ticker.
func (t loadTicks) Ticks(lo, hi float64) []plot.Tick {
	if len(t) == 0 {
		return plot.LogTicks{Prec: -1}.Ticks(lo, hi)
	}
	ticks := make([]plot.Tick, 0, len(t))
	for _, v := range t {
		ticks = append(ticks, plot.Tick{Value: v, Label: formatLoad(v)})
	}
	return ticks
}
