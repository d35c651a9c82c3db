//go:build linux && (mips || mipsle)

package guardian

// System call numbers that package syscall lacks, for MIPS o32.
const (
	sysPidfdSendSignal = 4424
	sysPidfdOpen       = 4434
)
