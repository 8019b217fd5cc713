package machine

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
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
	// dirs are the directories known to exist, so that a file whose
	// directory was made before is written without a stat of it: the
	// tree changes a hundred files a second, in the exporter's process.
	dirs map[string]bool
	// Pause, when set, is called between the parts of a Sync: between
	// those of the machine's tree as it is rendered, and after every
	// syncSlice of writing. The simulated node, which syncs in the
	// exporter's process, sets Pause (the function); tests leave it nil.
	Pause func()
}

// NewSyncer syncs machines into root/sys and root/proc (and where their
// Overrides and Links put files), staging files in
// root/.staging. root should be empty or hold a tree written by an earlier
// Syncer of the same root.
func NewSyncer(root string) *Syncer {
	return &Syncer{root: root, staging: filepath.Join(root, ".staging"), last: newTree(), dirs: map[string]bool{}}
}

// Sync writes m: the files that changed since the last Sync, and no
// others. On an error the next Sync starts again from what it knew, so a
// change that failed is retried.
func (s *Syncer) Sync(m *Machine) error {
	pause := s.Pause
	if pause == nil {
		pause = func() {}
	}
	t, err := m.tree(pause)
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
	pause()
	slice := time.Now()
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
			if time.Since(slice) >= syncSlice {
				pause()
				slice = time.Now()
			}
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

// syncSlice is how long Sync writes before it pauses.
const syncSlice = 500 * time.Microsecond

// Pause parks the calling goroutine for a moment. The simulated node
// renders and writes its tree in the exporter's own process, milliseconds
// of work a second, and at GOMAXPROCS 1 a goroutine that never blocks
// (raw file calls return to it at once) holds off every other one until it
// does: a scrape that arrives meanwhile is not even read, since the network
// is polled only when the P has nothing else to run. runtime.Gosched does
// not help, as the yielding goroutine is run again before the poll; a
// sleep parks it, and the scheduler polls. A real node has no such writer.
func Pause() { time.Sleep(time.Microsecond) }

// put writes one entry through the staging directory.
func (s *Syncer) put(p string, e entry) error {
	full := filepath.Join(s.root, filepath.FromSlash(p))
	if dir := filepath.Dir(full); !s.dirs[dir] {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		s.dirs[dir] = true
	}
	s.seq++
	tmp := filepath.Join(s.staging, strconv.FormatUint(s.seq, 10))
	var err error
	if e.isLink {
		err = os.Symlink(e.target, tmp)
	} else {
		err = writeFile(tmp, e.data)
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
		full := filepath.Join(s.root, filepath.FromSlash(dir))
		if os.Remove(full) != nil {
			return // not empty, or gone
		}
		delete(s.dirs, full)
		dir = path.Dir(dir)
	}
}

// writeFile writes a new file with raw calls: os.WriteFile would also try
// the file on the network poller (three fcntl and an epoll_ctl).
func writeFile(name, data string) error {
	fd, err := syscall.Open(name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	b := []byte(data)
	for len(b) > 0 && err == nil {
		var n int
		if n, err = syscall.Write(fd, b); err == syscall.EINTR {
			err = nil
		}
		b = b[max(n, 0):]
	}
	if cerr := syscall.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return &fs.PathError{Op: "write", Path: name, Err: err}
	}
	return nil
}
