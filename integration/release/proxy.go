package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// Proxy writes to out a module proxy on disk, in the layout GOPROXY=file://
// reads (<module>/@v/list, <version>.info, .mod, .zip), holding every
// published module of the repository at root at version, as a release
// would tag them: made from a copy of the working tree (the files git
// tracks, and those it does not ignore) pinned at version (see Pin). It
// returns the modules it wrote.
func Proxy(root, version, out string) ([]Module, error) {
	tmp, err := os.MkdirTemp("", "dlock-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := copyTree(root, tmp); err != nil {
		return nil, err
	}
	if err := Pin(tmp, version); err != nil {
		return nil, err
	}
	mods, err := Modules(tmp)
	if err != nil {
		return nil, err
	}
	var published []Module
	for _, m := range mods {
		if !m.Published() {
			continue
		}
		if err := writeVersion(out, m, version, filepath.Join(tmp, m.Dir)); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Path, err)
		}
		published = append(published, m)
	}
	return published, nil
}

// writeVersion writes m at version, from dir, into the proxy at out.
func writeVersion(out string, m Module, version, dir string) error {
	esc, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	var zip bytes.Buffer
	if err := modzip.CreateFromDir(&zip, module.Version{Path: m.Path, Version: version}, dir); err != nil {
		return err
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for ext, data := range map[string][]byte{".zip": zip.Bytes(), ".mod": mod, ".info": info} {
		if err := os.WriteFile(filepath.Join(vdir, version+ext), data, 0o644); err != nil {
			return err
		}
	}
	list, err := os.OpenFile(filepath.Join(vdir, "list"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(list, version)
	return errors.Join(err, list.Close())
}

// copyTree copies the files of the repository at root that git tracks or
// does not ignore (every file, where root is not a git checkout) to dst.
func copyTree(root, dst string) error {
	files, err := treeFiles(root)
	if err != nil {
		return err
	}
	for _, f := range files {
		src := filepath.Join(root, f)
		fi, err := os.Lstat(src)
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the working tree
			}
			return err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(to, data, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

func treeFiles(root string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(root, ".git")); err == nil {
		cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("git ls-files: %w", err)
		}
		return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"), nil
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		files = append(files, rel)
		return err
	})
	return files, err
}
