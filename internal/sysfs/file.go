package sysfs

import (
	"fmt"
	"io"
	"io/fs"
	"syscall"
)

// Open opens a sysfs or procfs file to read. Raw calls, not os.Open: that
// adds an attempt to register the file with the network poller (three
// fcntl and a failing epoll_ctl on Linux) and an *os.File with a
// finalizer, for every attribute of every device and process, every
// sample. prometheus/procfs reads sysfs the same way (util.SysReadFile).
func Open(path string) (int, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		switch err {
		case nil:
			return fd, nil
		case syscall.EINTR:
			continue
		}
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
}

// FDReader reads a file descriptor opened by Open; Path names it in
// errors.
type FDReader struct {
	FD   int
	Path string
}

func (r FDReader) Read(b []byte) (int, error) {
	for {
		n, err := syscall.Read(r.FD, b)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 0, &fs.PathError{Op: "read", Path: r.Path, Err: err}
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// ReadFile reads a small file whole into buf's storage, growing it; a
// file of limit bytes or more is an error. Unlike os.ReadFile it does not
// stat first (sysfs and procfs files say size 4096 or 0 whatever they
// hold) and allocates nothing once buf is big enough.
func ReadFile(path string, buf []byte, limit int) ([]byte, error) {
	fd, err := Open(path)
	if err != nil {
		return buf[:0], err
	}
	defer syscall.Close(fd)
	r := FDReader{fd, path}
	buf = buf[:0]
	for {
		if len(buf) >= limit {
			return buf, fmt.Errorf("%s: %d bytes or longer", path, limit)
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), limit)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
