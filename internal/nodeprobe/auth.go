package nodeprobe

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Node-to-node probes are authenticated with a token the nodes of a ring
// share (--node-probe.token-file), not with the exporter's web config
// alone: a reservation or join makes the target run an NCCL child on its
// GPUs and /probe makes the prober do so, so with the chart's defaults
// (hostNetwork, no web config) every host that reached the node's port
// could hold its GPUs and spend its limits. A shared token rather than
// mutual TLS: the chart can make it itself (a Secret it generates once
// and keeps), it needs no per-node certificate or issuer, and it rides
// beside the web config's basic auth rather than in its place. It is a
// bearer secret: over plain HTTP anyone who can read the node network's
// traffic can read it, which web TLS (web.tls in the chart) prevents.
//
// A request without the token is refused (401) before it is read further
// and before it takes any lock, GPU or limit, and counted by reason.

// TokenHeader carries the token from a prober to its target (the
// Authorization header is the web config's basic auth where it has one).
// A caller of /probe (Prometheus) may send it there too, or as
// "Authorization: Bearer <token>".
const TokenHeader = "X-Gpulink-Node-Probe-Token"

// MinTokenLength is the shortest token a node takes: 128 bits as hex.
const MinTokenLength = 32

// gpulink_node_probe_unauthenticated_requests_total's reason label.
const (
	AuthMissing = "missing" // no token (nor, on /probe, basic auth the web config checked)
	AuthWrong   = "wrong"   // a token that is not the node's
)

// ReadToken reads a token file: the token is the file's text without the
// white space around it, printable ASCII, at least MinTokenLength long.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return ParseToken(string(b))
}

// ParseToken is the token a token file's text s holds, as ReadToken
// takes it.
func ParseToken(s string) (string, error) {
	tok := strings.TrimSpace(s)
	if len(tok) < MinTokenLength {
		return "", fmt.Errorf("the token is %d characters: want at least %d (e.g. head -c 32 /dev/urandom | xxd -p -c 64)", len(tok), MinTokenLength)
	}
	for _, c := range []byte(tok) {
		if c <= ' ' || c >= 0x7f {
			return "", errors.New("the token has a character that is not printable ASCII, or a space inside it")
		}
	}
	return tok, nil
}

// authenticated says why r may not reach path ("" when it may): the
// node's token in TokenHeader or as a bearer token; on /probe also basic
// auth where the web config checks it (the exporter-toolkit refused a
// wrong one before this handler), which is how a Prometheus that sends
// the web config's credentials calls it.
func (n *Node) authenticated(r *http.Request, path string) string {
	if n.cfg.Token == "" {
		return ""
	}
	got := r.Header.Get(TokenHeader)
	if got == "" {
		if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			got = strings.TrimSpace(v)
		}
	}
	if got == "" {
		if _, _, ok := r.BasicAuth(); ok && path == ProbePath && n.cfg.WebBasicAuth {
			return ""
		}
		return AuthMissing
	}
	// Compared as hashes, in constant time: neither the token's length
	// nor its first differing byte shows in the time an answer takes.
	want, have := sha256.Sum256([]byte(n.cfg.Token)), sha256.Sum256([]byte(got))
	if subtle.ConstantTimeCompare(want[:], have[:]) != 1 {
		return AuthWrong
	}
	return ""
}

// guard serves h at path only to callers that authenticate; the others
// get 401, counted, and nothing else of the node.
func (n *Node) guard(path string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := n.authenticated(r, path); why != "" {
			n.unauthenticated.WithLabelValues(path, why).Inc()
			// Debug: a stranger's requests must not flood the log either.
			n.logger.Debug("refused a node-to-node request without the token", "path", path, "remote", r.RemoteAddr, "reason", why)
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpulink node-to-node probes"`)
			// The body is not read: the connection is closed after the
			// answer rather than drained for a stranger.
			w.Header().Set("Connection", "close")
			writeJSON(w, http.StatusUnauthorized, Decline{Reason: ReasonUnauthorized, Detail: "the node-to-node token (" + TokenHeader + ") is " + why})
			return
		}
		h(w, r)
	})
}

// setToken sends the node's token on a request to a target.
func (n *Node) setToken(r *http.Request) {
	if n.cfg.Token != "" {
		r.Header.Set(TokenHeader, n.cfg.Token)
	}
}
