//go:build linux

package guardian

// The guardian imports only packages that Go initializes among the first
// (see the package doc): these stand in for strconv, strings and os/exec,
// which would have it wait for the heavy packages.

import (
	"errors"
	"os"
	"syscall"
)

// itoa formats a non-negative n in decimal.
func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

// atoi parses a non-negative decimal int.
func atoi(s string) (int, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = 10*n + int(s[i]-'0')
	}
	return n, true
}

// fields returns up to max fields of s, separated by spaces.
func fields(s string, max int) []string {
	var f []string
	for len(f) < max {
		for len(s) > 0 && (s[0] == ' ' || s[0] == '\n') {
			s = s[1:]
		}
		if s == "" {
			break
		}
		i := 0
		for i < len(s) && s[i] != ' ' && s[i] != '\n' {
			i++
		}
		f, s = append(f, s[:i]), s[i:]
	}
	return f
}

// lookPath finds the executable named file as os/exec's LookPath does on
// Unix, with its error messages: a name with a slash is used as it is,
// any other is searched for in $PATH, and one found through a relative
// entry of $PATH is refused.
func lookPath(file string) (string, error) {
	for i := 0; i < len(file); i++ {
		if file[i] == '/' {
			return file, nil
		}
	}
	path := os.Getenv("PATH")
	for start := 0; path != "" && start <= len(path); {
		end := start
		for end < len(path) && path[end] != ':' {
			end++
		}
		dir := path[start:end]
		start = end + 1
		if dir == "" {
			dir = "." // an empty entry is the current directory
		}
		if p := dir + "/" + file; executable(p) {
			if p[0] != '/' {
				return "", errors.New(`exec: "` + file + `": cannot run executable found relative to current directory`)
			}
			return p, nil
		}
	}
	return "", errors.New(`exec: "` + file + `": executable file not found in $PATH`)
}

// executable reports whether path is a file (not a directory) that this
// process may execute.
func executable(path string) bool {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil || st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return false
	}
	return syscall.Access(path, 1 /* X_OK */) == nil
}
