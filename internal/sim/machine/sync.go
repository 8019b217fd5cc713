package machine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
)

// Syncer keeps a tree on disk in step with a machine that changes while
// something reads it, as the simulated node's does: each Sync writes only
// the files and symlinks that differ from the previous Sync, and removes
// those the machine no longer has (a process that exited). A file is
// replaced by a rename, so a reader sees its old content or its new one,
// never a half-written file, as with a real sysfs attribute.
type Syncer struct {
	root string
	// staging holds files while they are written, on the same file system
	// as root so that the rename into place is atomic; it sits beside the
	// tree rather than in it, where a reader listing a directory would see
	// the temporary names.
	staging string
	last    *tree
	seq     uint64
}

// NewSyncer syncs machines into root/sys and root/proc, staging files in
// root/.staging. root should be empty or hold a tree written by an earlier
// Syncer of the same root.
func NewSyncer(root string) *Syncer {
	return &Syncer{root: root, staging: filepath.Join(root, ".staging"), last: newTree()}
}

// Sync writes m: the files that changed since the last Sync, and no
// others. On an error the next Sync starts again from what it knew, so a
// change that failed is retried.
func (s *Syncer) Sync(m *Machine) error {
	t, err := m.tree()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.staging, 0o755); err != nil {
		return err
	}
	ps, err := t.localPaths()
	if err != nil {
		return err
	}
	// Files before symlinks, as in writeTo, so that nothing is written
	// through a link.
	for _, links := range []bool{false, true} {
		for _, p := range ps {
			e := t.entries[p]
			if e.isLink != links {
				continue
			}
			if old, ok := s.last.entries[p]; ok && old == e {
				continue
			}
			if err := s.put(p, e); err != nil {
				return err
			}
			s.last.entries[p] = e
		}
	}
	for _, p := range s.last.paths() {
		if _, keep := t.entries[p]; keep {
			continue
		}
		full := filepath.Join(s.root, filepath.FromSlash(p))
		if err := os.Remove(full); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		delete(s.last.entries, p)
		s.pruneDirs(path.Dir(p))
	}
	return nil
}

// put writes one entry through the staging directory.
func (s *Syncer) put(p string, e entry) error {
	full := filepath.Join(s.root, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	s.seq++
	tmp := filepath.Join(s.staging, fmt.Sprintf("%d", s.seq))
	var err error
	if e.isLink {
		err = os.Symlink(e.target, tmp)
	} else {
		err = os.WriteFile(tmp, []byte(e.data), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, full)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// pruneDirs removes dir and its parents, up to the root, while they are
// empty: what a removed process leaves behind.
func (s *Syncer) pruneDirs(dir string) {
	for dir != "." && dir != "/" && dir != "" {
		if os.Remove(filepath.Join(s.root, filepath.FromSlash(dir))) != nil {
			return // not empty, or gone
		}
		dir = path.Dir(dir)
	}
}
