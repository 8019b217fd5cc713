package kubelet

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// unary makes one unary gRPC call on the unix socket at path: method is
// the full name ("/v1.PodResourcesLister/List"), req the encoded request
// message; it returns the encoded response message, at most maxResponse
// bytes.
//
// gRPC is HTTP/2 with a 5-byte frame around each message and the status
// in the trailers; net/http speaks HTTP/2 without TLS ("prior knowledge")
// itself, so the exporter needs no gRPC library for the one call it
// makes. grpc-go was 2.8 MB of the binary and its package initialisation
// a share of the heap (bench/RESULTS.md).
func unary(ctx context.Context, path, method string, req []byte, maxResponse int) ([]byte, error) {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	transport := &http.Transport{
		Protocols: &protocols,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}
	defer transport.CloseIdleConnections()

	body := make([]byte, 5, 5+len(req))
	binary.BigEndian.PutUint32(body[1:], uint32(len(req)))
	body = append(body, req...)
	// The host is the socket's: the kubelet does not look at :authority.
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost"+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/grpc")
	hreq.Header.Set("Te", "trailers")
	resp, err := transport.RoundTrip(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP status %s, want 200 from a gRPC server", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/grpc") {
		return nil, fmt.Errorf("content type %q, want application/grpc", ct)
	}
	// An error can come as headers alone ("Trailers-Only").
	if err := grpcStatus(resp.Header); err != nil {
		return nil, err
	}
	msg, readErr := readMessage(resp.Body, maxResponse)
	// The trailers are there once the body has been read to its end; the
	// server's status says more than a body it cut short.
	switch statusErr := grpcStatus(resp.Trailer); {
	case statusErr != nil:
		return nil, statusErr
	case readErr != nil:
		return nil, readErr
	case resp.Trailer.Get("Grpc-Status") == "":
		return nil, errors.New("response without grpc-status")
	}
	return msg, nil
}

// readMessage reads the one length-prefixed message of a unary response;
// a body with more than one is an error.
func readMessage(r io.Reader, max int) ([]byte, error) {
	var prefix [5]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return nil, fmt.Errorf("response message prefix: %w", err)
	}
	if prefix[0] != 0 {
		// Only sent when asked for with grpc-accept-encoding, which this
		// client does not send.
		return nil, errors.New("response message is compressed; no compression was asked for")
	}
	n := binary.BigEndian.Uint32(prefix[1:])
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("response message of %d bytes is over the limit of %d", n, max)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, fmt.Errorf("response message of %d bytes: %w", n, err)
	}
	// Reading to the end also gets the trailers.
	rest, err := io.ReadAll(io.LimitReader(r, 1))
	if err != nil {
		return nil, fmt.Errorf("after the response message: %w", err)
	}
	if len(rest) > 0 {
		return nil, errors.New("more than one message in a unary response")
	}
	return msg, nil
}

// codeNames are gRPC's status codes (google.golang.org/grpc/codes).
var codeNames = [...]string{"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
	"Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"}

// StatusError is a gRPC status other than OK.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	name := "code " + strconv.Itoa(e.Code)
	if e.Code >= 0 && e.Code < len(codeNames) {
		name = codeNames[e.Code]
	}
	return fmt.Sprintf("gRPC status %s: %s", name, e.Message)
}

// grpcStatus is the status in h (headers or trailers): nil when OK or
// absent, a *StatusError otherwise.
func grpcStatus(h http.Header) error {
	s := h.Get("Grpc-Status")
	if s == "" || s == "0" {
		return nil
	}
	code, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("grpc-status %q is not a number", s)
	}
	msg := h.Get("Grpc-Message")
	// The message is percent-encoded.
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	return &StatusError{Code: code, Message: msg}
}
