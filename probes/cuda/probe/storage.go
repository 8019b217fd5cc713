package probe

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda"
	"github.com/gpulink/gpulink_exporter/probes/cufile"
)

// The storage probes: a file of the probe's own on the drive under
// Options.StorageDir, written once from GPU memory and read back into it.
// cuFile moves the bytes where its library loads and its driver opens, and
// says whether it goes direct (native) or bounces through host memory
// (compat); elsewhere O_DIRECT reads into pinned host memory and a copy to
// the GPU do, which is what a data loader without GDS does.

// storageReserve is free space the probe leaves on a filesystem beyond its
// file: a probe must never be what fills a disk.
const storageReserve = 1 << 30

// storageFile is one GPU's probe file and how it is reached.
type storageFile struct {
	dir  string
	fd   int
	size int64
	// chunk is one request's size, and the device buffer's.
	chunk int64
	mount numa.Mount
	drive string
	mode  string
	// why says, in posix mode, why cuFile does not serve the file.
	why     string
	lib     *cufile.Library
	fh      *cufile.Handle
	dev     cuda.DevicePtr
	bufReg  bool
	written bool
}

// StorageWrite writes the file from GPU memory, once: the write is what
// makes the file the reads read.
func (p *gpuProbe) StorageWrite(dir string) (probes.StorageMeasured, error) {
	f, err := p.storageFile(dir)
	if err != nil {
		return probes.StorageMeasured{}, err
	}
	m := f.measured()
	d, err := p.storageWrite(f)
	if err != nil {
		return m, err
	}
	m.Rate = probes.Sampled([]float64{float64(f.size) / d.Seconds()})
	return m, nil
}

// StorageRead reads the file into GPU memory Samples times, writing it
// first if no write has.
func (p *gpuProbe) StorageRead(dir string) (probes.StorageMeasured, error) {
	f, err := p.storageFile(dir)
	if err != nil {
		return probes.StorageMeasured{}, err
	}
	m := f.measured()
	if !f.written {
		if _, err := p.storageWrite(f); err != nil {
			return m, fmt.Errorf("writing the file to read: %w", err)
		}
	}
	rates := make([]float64, 0, p.opts.Samples)
	for range p.opts.Samples {
		d, err := p.storageRead(f)
		if err != nil {
			return m, err
		}
		rates = append(rates, float64(f.size)/d.Seconds())
	}
	m.Rate = probes.Sampled(rates)
	return m, nil
}

func (f *storageFile) measured() probes.StorageMeasured {
	return probes.StorageMeasured{Mode: f.mode, Filesystem: f.mount.FSType, Drive: f.drive, Note: f.why}
}

// storageFile opens the GPU's file in dir on first use: checks that a
// probe can run there (a *probes.Skip says why not), creates the file with
// O_DIRECT, finds the drive and filesystem under it and whether cuFile
// serves it, then unlinks it, so that nothing is left on the drive however
// the child ends.
func (p *gpuProbe) storageFile(dir string) (*storageFile, error) {
	if p.storage != nil || p.storageErr != nil {
		return p.storage, p.storageErr
	}
	f, err := p.openStorageFile(dir)
	if err != nil {
		p.storageErr = err
		p.closeStorage()
		return nil, err
	}
	return f, nil
}

func (p *gpuProbe) openStorageFile(dir string) (*storageFile, error) {
	size := p.opts.StorageBytes
	if err := storageRoom(dir, size); err != nil {
		return nil, err
	}
	removeStaleStorageFiles(dir)
	name := filepath.Join(dir, fmt.Sprintf("%s%d-%s", storageFilePrefix, os.Getpid(), strings.ReplaceAll(p.addr, ":", "-")))
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		// A filesystem that refuses O_DIRECT may have made the file
		// before it said so.
		if !errors.Is(err, unix.EEXIST) {
			_ = os.Remove(name)
		}
		return nil, openSkip(dir, err)
	}
	// cuFile opens the file again by its path when it registers it (a
	// second descriptor, for unaligned I/O) and refuses a file already
	// unlinked (CU_FILE_GETNEWFD_FAILED, seen on an H100): the name stays
	// until cuFile has the file, then goes, so that nothing is left on the
	// drive however the child ends afterwards. A child killed in between
	// leaves an empty file named with its pid, which the next probe in the
	// directory removes (removeStaleStorageFiles).
	// Requests of whole MiB stay whole blocks for O_DIRECT.
	chunk := min(p.opts.SizeBytes, size) / probes.MinSizeBytes * probes.MinSizeBytes
	f := &storageFile{dir: dir, fd: fd, size: size, chunk: chunk, mode: probes.StoragePOSIX}
	p.storage = f
	err = p.prepareStorageFile(f)
	if uerr := unix.Unlink(name); uerr != nil && err == nil {
		err = fmt.Errorf("removing the probe's file %s from its directory: %w", name, uerr)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// prepareStorageFile finds where f lives, fills its device buffer and has
// cuFile take it where it can, while f still has its name.
func (p *gpuProbe) prepareStorageFile(f *storageFile) error {
	var err error
	f.mount, f.drive = p.storagePlace(f.fd, f.dir)
	if f.dev, err = p.alloc(p.w, f.chunk); err != nil {
		return err
	}
	if err := p.w.do(func(c *cuda.Context) error { return c.Memset(f.dev, 0x5a, f.chunk) }); err != nil {
		return err
	}
	p.openCuFile(f)
	p.noteMemory()
	return nil
}

// storageFilePrefix begins the name of every probe's file; the pid follows.
const storageFilePrefix = ".gpulink-storage-probe-"

// removeStaleStorageFiles removes the files of probes in dir whose process
// is gone: a child killed while its file still had its name. A file of a
// live process, or one whose name does not parse, stays.
func removeStaleStorageFiles(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, storageFilePrefix+"*"))
	for _, name := range names {
		rest := strings.TrimPrefix(filepath.Base(name), storageFilePrefix)
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			_ = os.Remove(name)
		}
	}
}

// storageRoom is the skip, if any, for a directory the probe cannot use:
// not there, or too little free space for the file.
func storageRoom(dir string, size int64) error {
	st, err := os.Stat(dir)
	if err != nil {
		return &probes.Skip{Reason: probes.SkipStorageMissingDir, Detail: err.Error()}
	}
	if !st.IsDir() {
		return &probes.Skip{Reason: probes.SkipStorageMissingDir, Detail: dir + " is not a directory"}
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if free := int64(fs.Bavail) * fs.Bsize; free < size+storageReserve {
		return &probes.Skip{Reason: probes.SkipStorageDiskFull, Detail: fmt.Sprintf("%s has %s free; the probe's file of %s needs %s more left free",
			dir, probes.SizeString(free), probes.SizeString(size), probes.SizeString(storageReserve))}
	}
	return nil
}

// openSkip is why the probe's file could not be made in dir.
func openSkip(dir string, err error) error {
	switch {
	case errors.Is(err, unix.EINVAL):
		return &probes.Skip{Reason: probes.SkipStorageNoDirectIO, Detail: dir + ": the filesystem refuses O_DIRECT"}
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EROFS):
		return &probes.Skip{Reason: probes.SkipStoragePermission, Detail: fmt.Sprintf("creating a file in %s: %v", dir, err)}
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return &probes.Skip{Reason: probes.SkipStorageDiskFull, Detail: fmt.Sprintf("creating a file in %s: %v", dir, err)}
	}
	return fmt.Errorf("creating the probe's file in %s: %w", dir, err)
}

// storagePlace is the mount the file is on (the longest mount point
// holding dir) and the NVMe drives under its block device, comma-joined;
// what cannot be read is left empty.
func (p *gpuProbe) storagePlace(fd int, dir string) (numa.Mount, string) {
	var mount numa.Mount
	if abs, err := filepath.Abs(dir); err == nil {
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		mounts, _ := numa.ReadMounts(p.fs)
		for _, m := range mounts {
			if within(abs, m.MountPoint) && len(m.MountPoint) >= len(mount.MountPoint) {
				mount = m
			}
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return mount, ""
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	return mount, strings.Join(numa.BlockDeviceDrives(p.fs, dev), ",")
}

func within(path, dir string) bool {
	return dir == "/" || path == dir || strings.HasPrefix(path, dir+"/")
}

// openCuFile has cuFile serve f where its library loads, its driver opens
// and it takes the file; f stays in posix mode, saying why, where not.
func (p *gpuProbe) openCuFile(f *storageFile) {
	lib, err := cufile.Open(p.cufile)
	if err != nil {
		f.why = "no cuFile: " + err.Error()
		return
	}
	var props cufile.Properties
	err = p.w.do(func(*cuda.Context) error {
		if err := lib.DriverOpen(); err != nil {
			return err
		}
		if props, err = lib.Properties(); err != nil {
			lib.DriverClose()
			return err
		}
		if f.fh, err = lib.Register(f.fd); err != nil {
			lib.DriverClose()
			return err
		}
		if err := lib.RegisterBuffer(uint64(f.dev), f.chunk); err != nil {
			f.fh.Deregister()
			f.fh = nil
			lib.DriverClose()
			return err
		}
		return nil
	})
	if err != nil {
		lib.Close()
		f.why = "cuFile does not serve the file: " + err.Error()
		return
	}
	f.lib, f.bufReg = lib, true
	f.mode = probes.StorageCompat
	if props.NVFS() && props.Serves(f.mount.FSType) && numa.NativeFilesystem(f.mount.FSType, f.mount.Options) {
		f.mode = probes.StorageNative
	}
}

// storageWrite writes the whole file from the device buffer and waits for
// the drive to have it (fdatasync); it returns how long that took.
func (p *gpuProbe) storageWrite(f *storageFile) (time.Duration, error) {
	var host *pinned
	if f.lib == nil {
		h, err := p.pin(f.chunk, p.storageNode())
		if err != nil {
			return 0, err
		}
		defer p.unpin(h)
		host = h
	}
	var took time.Duration
	err := p.w.do(func(c *cuda.Context) error {
		var s *cuda.Stream
		if host != nil {
			var err error
			if s, err = c.NewStream(); err != nil {
				return err
			}
			defer s.Destroy()
		}
		start := time.Now()
		for off := int64(0); off < f.size; off += f.chunk {
			n := min(f.chunk, f.size-off)
			if f.lib != nil {
				if err := f.fh.Write(uint64(f.dev), n, off); err != nil {
					return err
				}
				continue
			}
			if err := s.Copy(host.dev, f.dev, n); err != nil {
				return err
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
			if err := pwriteFull(f.fd, host.buf.mem[:n], off); err != nil {
				return err
			}
		}
		if err := unix.Fdatasync(f.fd); err != nil {
			return fmt.Errorf("fdatasync: %w", err)
		}
		took = time.Since(start)
		return nil
	})
	if err != nil {
		return 0, storageIOError(f, "writing", err)
	}
	f.written = true
	p.busy += took
	return took, nil
}

// storageRead reads the whole file into the device buffer, request after
// request, and returns how long that took. Without cuFile two pinned
// buffers take turns: the drive fills one while the other is copied to
// the GPU, as a data loader's pipeline does.
func (p *gpuProbe) storageRead(f *storageFile) (time.Duration, error) {
	var hosts [2]*pinned
	if f.lib == nil {
		for i := range hosts {
			h, err := p.pin(f.chunk, p.storageNode())
			if err != nil {
				return 0, err
			}
			defer p.unpin(h)
			hosts[i] = h
		}
	}
	var took time.Duration
	err := p.w.do(func(c *cuda.Context) error {
		if f.lib != nil {
			start := time.Now()
			for off := int64(0); off < f.size; off += f.chunk {
				if err := f.fh.Read(uint64(f.dev), min(f.chunk, f.size-off), off); err != nil {
					return err
				}
			}
			took = time.Since(start)
			return nil
		}
		s, err := c.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		var done [2]*cuda.Event
		for i := range done {
			if done[i], err = c.NewEvent(); err != nil {
				return err
			}
			defer done[i].Destroy()
		}
		start := time.Now()
		for k, off := 0, int64(0); off < f.size; k, off = k+1, off+f.chunk {
			i, n := k%2, min(f.chunk, f.size-off)
			if k >= 2 {
				if err := done[i].Synchronize(); err != nil {
					return err
				}
			}
			if err := preadFull(f.fd, hosts[i].buf.mem[:n], off); err != nil {
				return err
			}
			if err := s.Copy(f.dev, hosts[i].dev, n); err != nil {
				return err
			}
			if err := done[i].Record(s); err != nil {
				return err
			}
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		took = time.Since(start)
		return nil
	})
	if err != nil {
		return 0, storageIOError(f, "reading", err)
	}
	p.busy += took
	return took, nil
}

// storageNode is the NUMA node for the bounce buffers: the GPU's own,
// which the round lists first, else unbound.
func (p *gpuProbe) storageNode() int {
	if len(p.opts.HostNodes) > 0 {
		return p.opts.HostNodes[0]
	}
	return -1
}

// storageIOError names the file's directory and mode in an I/O failure;
// a full disk met while writing is a skip, not a fault of the path.
func storageIOError(f *storageFile, doing string, err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return &probes.Skip{Reason: probes.SkipStorageDiskFull, Detail: fmt.Sprintf("%s the probe's file in %s: %v", doing, f.dir, err)}
	}
	return fmt.Errorf("%s the probe's file in %s (%s): %w", doing, f.dir, f.mode, err)
}

func preadFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pread(fd, b, off)
		if err != nil {
			return fmt.Errorf("pread: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("pread: end of file at %d", off)
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

func pwriteFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err != nil {
			return fmt.Errorf("pwrite: %w", err)
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// closeStorage gives back what the storage probes held; the file itself
// went when it was made (unlinked), and goes from the drive with its
// descriptor.
func (p *gpuProbe) closeStorage() {
	f := p.storage
	if f == nil {
		return
	}
	p.storage = nil
	if f.lib != nil {
		_ = p.w.do(func(*cuda.Context) error {
			if f.bufReg {
				_ = f.lib.DeregisterBuffer(uint64(f.dev))
			}
			f.fh.Deregister()
			return f.lib.DriverClose()
		})
		f.lib.Close()
	}
	p.free(p.w, f.dev, f.chunk)
	if f.fd >= 0 {
		unix.Close(f.fd)
	}
}

// guardStdout keeps what cuFile prints out of the round: where stdout is
// this process's file descriptor 1, the round goes to a duplicate of it
// and descriptor 1 becomes stderr, so that whatever a library writes to 1
// lands in the log. cuFile's own log file, cufile.log in the working
// directory unless CUFILE_LOGFILE_PATH names one, goes to stderr too:
// nothing of the probe's is left where the daemon runs.
func guardStdout(stdout io.Writer) (io.Writer, error) {
	if os.Getenv("CUFILE_LOGFILE_PATH") == "" {
		os.Setenv("CUFILE_LOGFILE_PATH", "/dev/stderr")
	}
	if f, ok := stdout.(*os.File); !ok || f.Fd() != 1 {
		return stdout, nil
	}
	fd, err := unix.Dup(1)
	if err != nil {
		return nil, fmt.Errorf("keeping stdout for the round: %w", err)
	}
	unix.CloseOnExec(fd)
	if err := unix.Dup2(2, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("moving stdout to stderr: %w", err)
	}
	return os.NewFile(uintptr(fd), "stdout"), nil
}
