package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// Root is the module path of the core module; every other module of the
// repository has a path below it.
const Root = "github.com/dlock-go/dlock"

// Module is one module of the repository.
type Module struct {
	Path string // module path
	Dir  string // directory relative to the repository's root, "." for the core
}

// Published reports whether the module is released: the core and every
// module under contrib/. The modules under integration/ are tests and
// tools of this repository, never required by what users import.
func (m Module) Published() bool {
	return m.Dir == "." || strings.HasPrefix(m.Dir, "contrib/")
}

// Modules returns the modules of the repository at root (every go.mod
// below it but those under testdata, vendor or hidden directories), the
// core first, then by path.
func Modules(root string) ([]Module, error) {
	var mods []Module
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		path := modfile.ModulePath(data)
		if path != Root && !strings.HasPrefix(path, Root+"/") {
			return fmt.Errorf("%s: module %q is not under %s", p, path, Root)
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		mods = append(mods, Module{Path: path, Dir: filepath.ToSlash(rel)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(mods, func(a, b Module) int {
		switch {
		case a.Path == Root:
			return -1
		case b.Path == Root:
			return 1
		}
		return strings.Compare(a.Path, b.Path)
	})
	if len(mods) == 0 || mods[0].Path != Root {
		return nil, fmt.Errorf("%s: no go.mod of %s", root, Root)
	}
	return mods, nil
}

// Pin makes every module of the repository at root require the others at
// version, with no replace directive for them in any go.mod; go.work
// replaces each of them, at that version, by its directory, so that the
// workspace builds the tree as it is. This is the state of the tree that a
// release tags (see docs/release.md), and the state the tree is kept in
// between releases, at the version the next release will have.
func Pin(root, version string) error {
	if !semver.IsValid(version) || semver.Build(version) != "" {
		return fmt.Errorf("release: %q is not a module version (vMAJOR.MINOR.PATCH[-PRERELEASE])", version)
	}
	if semver.Major(version) != "v0" && semver.Major(version) != "v1" {
		return fmt.Errorf("release: %s would need a /%s suffix on every module path", version, semver.Major(version))
	}
	mods, err := Modules(root)
	if err != nil {
		return err
	}
	ours := make(map[string]bool, len(mods))
	for _, m := range mods {
		ours[m.Path] = true
	}
	required := make(map[string]bool)
	for _, m := range mods {
		file := filepath.Join(root, m.Dir, "go.mod")
		f, err := parseGoMod(file)
		if err != nil {
			return err
		}
		for _, r := range f.Replace {
			if !ours[r.Old.Path] && m.Published() {
				return fmt.Errorf("release: %s replaces %s: a dependency's replace is ignored, and go install refuses a module that has one", m.Path, r.Old.Path)
			}
			if ours[r.Old.Path] {
				if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
					return err
				}
			}
		}
		for _, r := range f.Require {
			if !ours[r.Mod.Path] && (r.Mod.Path == Root || strings.HasPrefix(r.Mod.Path, Root+"/")) {
				return fmt.Errorf("release: %s requires %s, which is not a module of this repository", m.Path, r.Mod.Path)
			}
			if ours[r.Mod.Path] {
				if m.Published() && !modOf(mods, r.Mod.Path).Published() {
					return fmt.Errorf("release: %s requires %s, which is not published", m.Path, r.Mod.Path)
				}
				if err := f.AddRequire(r.Mod.Path, version); err != nil {
					return err
				}
				required[r.Mod.Path] = true
			}
		}
		if err := write(file, f.Cleanup, f.Format); err != nil {
			return err
		}
	}
	return pinWork(root, version, mods, required)
}

// pinWork rewrites root's go.work: every module used, and a replace at
// version for each one some module requires.
func pinWork(root, version string, mods []Module, required map[string]bool) error {
	file := filepath.Join(root, "go.work")
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // a tree without a workspace (a module zip's copy)
	}
	if err != nil {
		return err
	}
	w, err := modfile.ParseWork(file, data, nil)
	if err != nil {
		return err
	}
	for _, u := range w.Use {
		if err := w.DropUse(u.Path); err != nil {
			return err
		}
	}
	for _, r := range w.Replace {
		if strings.HasPrefix(r.Old.Path, Root) {
			if err := w.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return err
			}
		}
	}
	for _, m := range mods {
		dir := "./" + m.Dir
		if m.Dir == "." {
			dir = "."
		}
		if err := w.AddUse(dir, ""); err != nil {
			return err
		}
		if required[m.Path] {
			if err := w.AddReplace(m.Path, version, dir, ""); err != nil {
				return err
			}
		}
	}
	w.SortBlocks()
	return write(file, w.Cleanup, func() ([]byte, error) { return modfile.Format(w.Syntax), nil })
}

func parseGoMod(file string) (*modfile.File, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(file, data, nil)
}

func modOf(mods []Module, path string) Module {
	for _, m := range mods {
		if m.Path == path {
			return m
		}
	}
	return Module{}
}

func write(file string, cleanup func(), format func() ([]byte, error)) error {
	cleanup()
	out, err := format()
	if err != nil {
		return err
	}
	return os.WriteFile(file, out, 0o644)
}
