package kubelet

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// frame is msg with gRPC's 5-byte prefix (flag, big-endian length).
func frame(flag byte, msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flag
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

func TestReadMessage(t *testing.T) {
	msg, err := readMessage(bytes.NewReader(frame(0, []byte("pods"))), 16)
	if err != nil || string(msg) != "pods" {
		t.Fatalf("got %q, %v", msg, err)
	}
	if msg, err := readMessage(bytes.NewReader(frame(0, nil)), 16); err != nil || len(msg) != 0 {
		t.Errorf("empty message: %q, %v", msg, err)
	}
	for _, c := range []struct {
		name string
		body []byte
		want string
	}{
		{"no body", nil, "prefix: EOF"},
		{"compressed", frame(1, []byte("pods")), "compressed"},
		{"over the limit", frame(0, make([]byte, 17)), "17 bytes is over the limit of 16"},
		{"cut short", frame(0, []byte("pods"))[:7], "message of 4 bytes: unexpected EOF"},
		{"two messages", append(frame(0, []byte("a")), frame(0, []byte("b"))...), "more than one message"},
	} {
		if _, err := readMessage(bytes.NewReader(c.body), 16); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

// serveH2C answers every request on a fresh unix socket with h, over
// HTTP/2 without TLS, as a gRPC server does.
func serveH2C(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &protocols}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return path
}

func call(t *testing.T, path string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return unary(ctx, path, listMethod, nil, 1<<10)
}

// What a server that is not a well-behaved gRPC server answers is an error
// that says what was wrong, never a response.
func TestUnaryRefusesWhatIsNotGRPC(t *testing.T) {
	grpcHeaders := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
	}
	for _, c := range []struct {
		name string
		h    http.HandlerFunc
		want string
	}{
		{"not found", func(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) }, "HTTP status 404"},
		{"not gRPC", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello")) }, "content type"},
		{"no status", func(w http.ResponseWriter, _ *http.Request) {
			grpcHeaders(w)
			_, _ = w.Write(frame(0, nil))
		}, "without grpc-status"},
		{"status in the trailers", func(w http.ResponseWriter, _ *http.Request) {
			grpcHeaders(w)
			_, _ = w.Write(frame(0, []byte("partial")))
			w.Header().Set("Grpc-Status", "14")
			w.Header().Set("Grpc-Message", "kubelet going away: 100%25 sure")
		}, "gRPC status Unavailable: kubelet going away: 100% sure"},
		{"status alone (trailers-only)", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Grpc-Status", "12")
			w.Header().Set("Grpc-Message", "unknown service v1.PodResourcesLister")
		}, "gRPC status Unimplemented: unknown service"},
		{"an unknown code", func(w http.ResponseWriter, _ *http.Request) {
			grpcHeaders(w)
			w.Header().Set("Grpc-Status", "99")
		}, "gRPC status code 99"},
		{"a code that is not a number", func(w http.ResponseWriter, _ *http.Request) {
			grpcHeaders(w)
			_, _ = w.Write(frame(0, nil))
			w.Header().Set("Grpc-Status", "OK")
		}, `grpc-status "OK" is not a number`},
		{"over the limit", func(w http.ResponseWriter, _ *http.Request) {
			grpcHeaders(w)
			_, _ = w.Write(frame(0, make([]byte, 2<<10)))
			w.Header().Set("Grpc-Status", "0")
		}, "over the limit"},
	} {
		msg, err := call(t, serveH2C(t, c.h))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %q, %v; want an error with %q", c.name, msg, err, c.want)
		}
	}
}

// The request is what a gRPC server expects: POST of the method, gRPC's
// content type and TE, and one empty framed message.
func TestUnaryRequest(t *testing.T) {
	var got *http.Request
	var body bytes.Buffer
	path := serveH2C(t, func(w http.ResponseWriter, r *http.Request) {
		got = r
		_, _ = body.ReadFrom(r.Body)
		w.Header().Set("Content-Type", "application/grpc+proto")
		w.Header().Set("Trailer", "Grpc-Status")
		_, _ = w.Write(frame(0, []byte("answer")))
		w.Header().Set("Grpc-Status", "0")
	})
	msg, err := call(t, path)
	if err != nil || string(msg) != "answer" {
		t.Fatalf("got %q, %v", msg, err)
	}
	if got.Method != http.MethodPost || got.URL.Path != listMethod || got.ProtoMajor != 2 ||
		got.Header.Get("Content-Type") != "application/grpc" || got.Header.Get("Te") != "trailers" {
		t.Errorf("request %s %s %s, headers %v", got.Method, got.URL.Path, got.Proto, got.Header)
	}
	if !bytes.Equal(body.Bytes(), frame(0, nil)) {
		t.Errorf("body %x, want an empty framed message", body.Bytes())
	}
}

// An HTTP/1 server on the socket does not speak HTTP/2: an error, not a
// hang.
func TestUnaryAgainstHTTP1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	if _, err := call(t, path); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the server's refusal before the deadline", err)
	}
}
