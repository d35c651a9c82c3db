//go:build linux && !mips && !mipsle && !mips64 && !mips64le

package guardian

// System call numbers that package syscall lacks: the same on every Linux
// architecture since 5.1, except MIPS (sysnum_linux_mips*x.go).
const (
	sysPidfdSendSignal = 424
	sysPidfdOpen       = 434
)
