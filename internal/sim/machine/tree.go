package machine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// tree is a file tree in memory: paths relative to its root, with forward
// slashes, mapped to file contents or symlink targets. Machines are built
// into a tree before anything touches the disk, so a model that would
// write one path twice fails instead of silently overwriting.
type tree struct {
	entries map[string]entry
	err     error
}

type entry struct {
	data   string
	target string // symlink target, as the link holds it
	isLink bool
}

func newTree() *tree { return &tree{entries: map[string]entry{}} }

func (t *tree) add(p string, e entry) {
	if _, dup := t.entries[p]; dup && t.err == nil {
		t.err = fmt.Errorf("machine: %s written twice", p)
	}
	t.entries[p] = e
}

// file adds a file with exactly data as its content.
func (t *tree) file(p, data string) { t.add(p, entry{data: data}) }

// line adds a one-line file, as most sysfs attributes are: v printed with
// fmt.Sprint and a newline.
func (t *tree) line(p string, v any) { t.file(p, fmt.Sprint(v)+"\n") }

// link adds a symlink at p to the root-relative path to, written relative
// to p's directory as the kernel writes its links; an absolute to leaves
// the tree (the simulated node's links to the host's processes).
func (t *tree) link(p, to string) {
	if path.IsAbs(to) {
		t.add(p, entry{target: to, isLink: true})
		return
	}
	t.add(p, entry{target: relPath(path.Dir(p), to), isLink: true})
}

// relPath returns the path from directory from to to, both relative to
// the same root, in the form sysfs gives its links: up from from until
// reaching an ancestor of to's parent, then down to to. So a link to an
// ancestor reads ../../../virtio2 rather than ../.., as on a real machine.
func relPath(from, to string) string {
	f, g := strings.Split(from, "/"), strings.Split(to, "/")
	i := 0
	for i < len(f) && i < len(g)-1 && f[i] == g[i] {
		i++
	}
	up := slices.Repeat([]string{".."}, len(f)-i)
	return strings.Join(append(up, g[i:]...), "/")
}

// paths returns the tree's paths in sorted order.
func (t *tree) paths() []string {
	ps := make([]string, 0, len(t.entries))
	for p := range t.entries {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// writeTo creates the tree's files and symlinks under root. Files come
// first: since no symlink exists yet while they are written, no path can
// reach outside root through one, whatever the tree holds. Existing files
// and links at the same paths are replaced; anything else under root is
// left alone.
func (t *tree) writeTo(root string) error {
	if t.err != nil {
		return t.err
	}
	ps, err := t.localPaths()
	if err != nil {
		return err
	}
	for _, links := range []bool{false, true} {
		for _, p := range ps {
			e := t.entries[p]
			if e.isLink != links {
				continue
			}
			full := filepath.Join(root, filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				return err
			}
			if !e.isLink {
				if err := os.WriteFile(full, []byte(e.data), 0o644); err != nil {
					return err
				}
				continue
			}
			if err := os.Remove(full); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if err := os.Symlink(e.target, full); err != nil {
				return err
			}
		}
	}
	return nil
}

// readTree reads the files and symlinks under root. Directories are
// implied by the paths in them; empty ones are not kept.
func readTree(root string) (*tree, error) {
	t := newTree()
	err := filepath.WalkDir(root, func(full string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, full)
		if err != nil {
			return err
		}
		p := filepath.ToSlash(rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return err
			}
			t.add(p, entry{target: target, isLink: true})
		case d.Type().IsRegular():
			b, err := os.ReadFile(full)
			if err != nil {
				return err
			}
			t.file(p, string(b))
		default:
			return fmt.Errorf("machine: %s is neither a file nor a symlink", full)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return t, t.err
}

// localPaths is t.paths(), refused if any of them would leave the root.
func (t *tree) localPaths() ([]string, error) {
	ps := t.paths()
	for _, p := range ps {
		if !filepath.IsLocal(filepath.FromSlash(p)) {
			return nil, fmt.Errorf("machine: path %q leaves the root", p)
		}
	}
	return ps, nil
}
