// Command release keeps the repository's modules releasable and checks
// that a release installs as users receive it (docs/release.md):
//
//	go run ./integration/release pin v0.2.0        # every module requires the others at v0.2.0; go.work replaces them
//	go run ./integration/release tidy v0.2.0       # go mod tidy in every module, then pin
//	go run ./integration/release proxy v0.2.0 DIR  # a module proxy on disk (GOPROXY=file://DIR) of every published module at v0.2.0
//	DLOCK_LONG=1 go test ./integration/release     # the release check (TestRelease)
//
// Run it from the repository's root.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	switch {
	case len(args) == 2 && args[0] == "pin":
		return Pin(root, args[1])
	case len(args) == 2 && args[0] == "tidy":
		return Tidy(root, args[1])
	case len(args) == 3 && args[0] == "proxy":
		_, err := Proxy(root, args[1], args[2])
		return err
	}
	return fmt.Errorf("usage: release pin VERSION | release tidy VERSION | release proxy VERSION DIR")
}
