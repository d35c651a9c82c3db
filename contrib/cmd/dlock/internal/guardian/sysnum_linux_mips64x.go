//go:build linux && (mips64 || mips64le)

package guardian

// System call numbers that package syscall lacks, for MIPS n64.
const (
	sysPidfdSendSignal = 5424
	sysPidfdOpen       = 5434
)
