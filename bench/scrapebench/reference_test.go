package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"os"
	"testing"
)

// The test binary is scrapebench too when asked: startReference starts
// os.Executable() again as the reference server.
func TestMain(m *testing.M) {
	if os.Getenv("SCRAPEBENCH_TEST_AS_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestReferenceServesTheExportersBytes(t *testing.T) {
	t.Setenv("SCRAPEBENCH_TEST_AS_MAIN", "1")
	var body bytes.Buffer
	zw := gzip.NewWriter(&body)
	io.WriteString(zw, "# TYPE up gauge\nup 1\n") //nolint:errcheck // a bytes.Buffer does not fail
	zw.Close()
	const ctype = "application/openmetrics-text; version=1.0.0; charset=utf-8"

	ref, err := startReference(body.Bytes(), ctype, 1)
	if err != nil {
		t.Fatal(err)
	}
	file := ref.file
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	var buf bytes.Buffer
	took, n, wire, gotType, _, err := scrape(client, ref.url, acceptScrape, true, &buf)
	if err != nil {
		ref.stop()
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), body.Bytes()) || wire != int64(body.Len()) {
		t.Errorf("the reference sent %d bytes %x, want the %d given", wire, buf.Bytes(), body.Len())
	}
	if n != int64(len("# TYPE up gauge\nup 1\n")) || gotType != ctype || took <= 0 {
		t.Errorf("scrape of the reference: %d bytes unzipped, type %q, took %v", n, gotType, took)
	}
	ref.stop()
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the body's file %s is still there after stop: %v", file, err)
	}
	if _, err := client.Get(ref.url); err == nil {
		t.Error("the reference still answers after stop")
	}
}

func TestFixedHandlerSaysGzipOnlyForGzip(t *testing.T) {
	for _, tc := range []struct {
		body []byte
		gzip bool
	}{{[]byte{0x1f, 0x8b, 8, 0}, true}, {[]byte("up 1\n"), false}} {
		rec := newRecorder()
		fixedHandler(tc.body, "text/plain").ServeHTTP(rec, &http.Request{})
		if got := rec.h.Get("Content-Encoding") == "gzip"; got != tc.gzip {
			t.Errorf("body %q: Content-Encoding %q", tc.body, rec.h.Get("Content-Encoding"))
		}
		if !bytes.Equal(rec.b.Bytes(), tc.body) {
			t.Errorf("body %q answered as %q", tc.body, rec.b.Bytes())
		}
	}
}

// recorder is the least http.ResponseWriter; httptest would do, but this
// package keeps to what the binary links.
type recorder struct {
	h http.Header
	b bytes.Buffer
}

func newRecorder() *recorder                    { return &recorder{h: http.Header{}} }
func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(p []byte) (int, error) { return r.b.Write(p) }
func (r *recorder) WriteHeader(int)             {}
