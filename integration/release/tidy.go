package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Tidy runs go mod tidy in every module of the repository at root, pinned
// at version. go mod tidy ignores go.work and would look the repository's
// own modules up at that version on the module proxy (where an unreleased
// one is not): for the run each go.mod replaces them by their directories,
// and Pin removes those replacements again after.
func Tidy(root, version string) error {
	mods, err := Modules(root)
	if err != nil {
		return err
	}
	for _, m := range mods {
		file := filepath.Join(root, m.Dir, "go.mod")
		f, err := parseGoMod(file)
		if err != nil {
			return err
		}
		for _, o := range mods {
			if o.Path == m.Path {
				continue
			}
			rel, err := filepath.Rel(filepath.Join(root, m.Dir), filepath.Join(root, o.Dir))
			if err != nil {
				return err
			}
			if rel = filepath.ToSlash(rel); !strings.HasPrefix(rel, "../") {
				rel = "./" + rel
			}
			if err := f.AddReplace(o.Path, "", rel, ""); err != nil {
				return err
			}
		}
		if err := write(file, f.Cleanup, f.Format); err != nil {
			return err
		}
		cmd := exec.Command("go", "mod", "tidy")
		cmd.Dir = filepath.Join(root, m.Dir)
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = Pin(root, version)
			return fmt.Errorf("go mod tidy in %s: %w\n%s", m.Dir, err, out)
		}
	}
	return Pin(root, version)
}
