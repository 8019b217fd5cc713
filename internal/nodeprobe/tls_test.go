package nodeprobe

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
)

// ringPasswordHash is bcrypt("ring-secret"), cost 4.
const ringPasswordHash = "$2a$04$mmiXph5GLp45j0kVikuH/.L8BN0avj8WiTT8pgRHs40os.POn3D3."

// writeSelfSigned writes a certificate for 127.0.0.1 and localhost and its
// key into dir.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gpulink node-probe test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for _, f := range []struct {
		path, kind string
		der        []byte
	}{{certFile, "CERTIFICATE", der}, {keyFile, "EC PRIVATE KEY", kb}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// serveWebConfig serves h on loopback through exporter-toolkit with the
// web config at path, as the exporter serves its whole mux; host:port.
func serveWebConfig(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The refused handshakes are the point of some cases: not logged.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	none := false
	addrs := []string{}
	done := make(chan error, 1)
	go func() {
		done <- web.Serve(ln, srv, &web.FlagConfig{WebListenAddresses: &addrs, WebSystemdSocket: &none, WebConfigFile: &path},
			slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("web.Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// The target behind exporter-toolkit's TLS and basic auth: the prober's
// module carries the CA and the credentials; without the right ones the
// probe fails as unauthorized and the target runs nothing.
func TestProbeThroughWebConfig(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
	webConfig := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(webConfig, []byte("tls_server_config:\n  cert_file: "+cert+"\n  key_file: "+key+
		"\nbasic_auth_users:\n  prober: "+ringPasswordHash+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The modules file names the CA relative to itself.
	modulesFile := filepath.Join(dir, "modules.yml")
	if err := os.WriteFile(modulesFile, []byte(`modules:
  ring:
    http_client:
      tls_config:
        ca_file: cert.pem
      basic_auth:
        username: prober
        password: ring-secret
  wrong_password:
    http_client:
      tls_config:
        ca_file: cert.pem
      basic_auth:
        username: prober
        password: guess
  no_credentials:
    http_client:
      tls_config:
        ca_file: cert.pem
  no_tls: {}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := LoadFile(modulesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		module, scheme string
		reason         string // "" for a success
	}{
		{"ring", "", ""},
		{"ring", "https://", ""},
		{"wrong_password", "", ReasonUnauthorized},
		{"no_credentials", "", ReasonUnauthorized},
		// https without the CA: the certificate is refused.
		{"no_tls", "https://", ReasonUnreachable},
		// Plain http to a TLS server: Go's server answers 400 "Client sent
		// an HTTP request to an HTTPS server", no exporter's answer.
		{"no_tls", "", ReasonBadResponse},
	} {
		t.Run(tc.module+"/"+tc.scheme, func(t *testing.T) {
			fab := newFabric()
			a := newTestNode(t, fab, "a", 50e9, true, func(c *Config) { c.Modules = NewModules(file) })
			b := newTestNode(t, fab, "b", 50e9, true, func(c *Config) { c.Modules = NewModules(file) })
			addr := serveWebConfig(t, b.mux, webConfig)
			params := url.Values{"target": {tc.scheme + addr}, "module": {tc.module}}
			_, body := a.probe(t, params, "")
			s := parse(t, body)
			runs, _ := b.runner.calls()
			if tc.reason == "" {
				if v, _ := s.value("probe_success"); v != 1 {
					t.Fatalf("probe failed:\n%s\nlog: %s", body, a.log.String())
				}
				if len(runs) != 1 {
					t.Errorf("the target ran %d children", len(runs))
				}
				return
			}
			s.failed(t, tc.reason)
			if len(runs) != 0 {
				t.Errorf("the target ran a child for a prober it refused")
			}
			// Refused at the reservation: no child started.
			if runs, _ := a.runner.calls(); len(runs) != 0 {
				t.Errorf("the prober started %d children for a target that refused it", len(runs))
			}
		})
	}
}
