package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Every endpoint's connections are bounded in time (issue 34): a client
// that opened connections, sent one request each and kept them alive held
// a goroutine and a descriptor each for good (only the header timeout was
// set). The server closes a connection idle past its idle timeout, and one
// that never sends its request past the header timeout.
func TestServerClosesIdleConnections(t *testing.T) {
	for name, d := range map[string]time.Duration{"header": defaultServerTimeouts.header, "read": defaultServerTimeouts.read,
		"write": defaultServerTimeouts.write, "idle": defaultServerTimeouts.idle} {
		if d <= 0 {
			t.Errorf("the server's %s timeout is %s: unbounded", name, d)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }),
		serverTimeouts{header: 200 * time.Millisecond, read: time.Second, write: time.Second, idle: 200 * time.Millisecond})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	closed := func(conn net.Conn, r *bufio.Reader) error {
		// Well past the timeouts: a connection still open then is held.
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %v, want the server to close the connection (EOF)", err)
		}
		return nil
	}
	// Kept alive after one request.
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err := closed(conn, r); err != nil {
		t.Errorf("a kept-alive connection after its request: %v", err)
	}
	// Never a request.
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if err := closed(silent, bufio.NewReader(silent)); err != nil {
		t.Errorf("a connection that sends nothing: %v", err)
	}
}
