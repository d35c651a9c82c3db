package history

// Fault is one injected fault, as the run's schedule.json records it.
type Fault struct {
	N       int      `json:"n"`
	Class   string   `json:"class"`
	Start   int64    `json:"start"` // Unix ns: when it began
	Heal    int64    `json:"heal"`  // Unix ns: when it was healed
	Targets []string `json:"targets,omitempty"`
	Workers []int    `json:"workers,omitempty"` // workers paused or on a fault clock (their IDs)
	Stopped int64    `json:"stopped,omitempty"` // pause-*: Unix ns when SIGSTOP was sent (Start is when the fault began looking for its target)
	Note    string   `json:"note,omitempty"`
	Err     string   `json:"err,omitempty"`
}
