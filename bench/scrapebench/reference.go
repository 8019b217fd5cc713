package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// The reference is a server that answers every request with the same
// bytes, doing nothing else: the exporter's own response, in a process of
// its own at the exporter's GOMAXPROCS (-reference-gomaxprocs), scraped by the same
// client between the exporter's scrapes. Its latencies are what this
// machine, its loopback, Go's net/http and this client cost at that moment;
// what the exporter adds to a scrape is the difference. A tail that both
// show at the same moments belongs to the machine, not to the exporter.

// reference is a running reference server.
type reference struct {
	cmd  *exec.Cmd
	url  string
	file string
}

// startReference starts this program again as a reference server for body
// (as the exporter sent it, gzipped or not) with the content type ctype,
// at GOMAXPROCS procs.
func startReference(body []byte, ctype string, procs int) (*reference, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	f, err := os.CreateTemp("", "scrapebench-reference-*")
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	if _, err := f.Write(body); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("reference: %w", err)
	}
	f.Close()
	r := &reference{file: f.Name()}
	r.cmd = exec.Command(self, "-serve-file", f.Name(), "-serve-type", ctype)
	r.cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(procs))
	r.cmd.Stderr = os.Stderr
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("reference: %w", err)
	}
	if err := r.cmd.Start(); err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("reference: %w", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		r.stop()
		return nil, fmt.Errorf("reference server did not say where it listens: %w", err)
	}
	r.url = strings.TrimSpace(line)
	return r, nil
}

func (r *reference) stop() {
	if r.cmd.Process != nil {
		_ = r.cmd.Process.Kill() // it may have exited already
		_ = r.cmd.Wait()         // killed
	}
	os.Remove(r.file)
}

// serveFixed is the reference server: it prints its URL and answers every
// request with the file's bytes until killed.
func serveFixed(file, ctype string) error {
	body, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("http://%s/metrics\n", ln.Addr())
	err = http.Serve(ln, fixedHandler(body, ctype))
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// fixedHandler answers with body, as the exporter sent it: gzipped bytes
// say so in Content-Encoding.
func fixedHandler(body []byte, ctype string) http.Handler {
	gzipped := len(body) >= 2 && body[0] == 0x1f && body[1] == 0x8b
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", ctype)
		h.Set("Content-Length", strconv.Itoa(len(body)))
		if gzipped {
			h.Set("Content-Encoding", "gzip")
		}
		h.Add("Vary", "Accept-Encoding")
		w.Write(body) //nolint:errcheck // a client that went away
	})
}
