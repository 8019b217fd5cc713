package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
)

// serve serves the metrics and the sources' routes on one server, through
// exporter-toolkit: its web config (TLS, basic auth) wraps the whole mux,
// so /probe and /node-probe/join are behind it as /metrics is.
func serve(ctx context.Context, logger *slog.Logger, metrics http.Handler, routes []route, webConfig *web.FlagConfig, metricsPath string) error {
	mux := http.NewServeMux()
	mux.Handle(metricsPath, metrics)
	for _, r := range routes {
		mux.Handle(r.path, r.handler)
	}
	if metricsPath != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "gpulink_exporter",
			Description: "Prometheus exporter for GPU links: PCIe, NVLink, NICs and NUMA placement",
			Version:     version.Info(),
			Links:       []web.LandingLinks{{Address: metricsPath, Text: "Metrics"}},
		})
		if err != nil {
			return fmt.Errorf("landing page: %w", err)
		}
		mux.Handle("/", landing)
	}
	srv := newServer(mux, defaultServerTimeouts)
	errc := make(chan error, 1)
	go func() { errc <- web.ListenAndServe(srv, webConfig, logger) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		logger.Info("shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}

// serverTimeouts bound what a client may hold of the server: a
// connection, its goroutine and descriptor.
type serverTimeouts struct {
	// header: the request line and headers; read: the whole request, body
	// included (net/http lifts it once the body is read, to watch the
	// connection while a long answer is made); write: the answer, from
	// the end of the request's headers (/probe and joins lift it to their
	// session's deadline: internal/nodeprobe); idle: a kept-alive
	// connection between requests.
	header, read, write, idle time.Duration
}

// defaultServerTimeouts: a scrape, a reservation or a landing page is
// answered in well under a minute; the idle timeout is above the usual
// scrape intervals (15 s to 1 m), so that Prometheus' kept-alive
// connection is reused rather than made again (a TLS handshake) each
// scrape, and a client that opens connections and leaves them holds
// each for two minutes at most.
var defaultServerTimeouts = serverTimeouts{header: 10 * time.Second, read: 30 * time.Second, write: 2 * time.Minute, idle: 2 * time.Minute}

// newServer is the server of h with timeouts t on every endpoint.
func newServer(h http.Handler, t serverTimeouts) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.header, ReadTimeout: t.read, WriteTimeout: t.write, IdleTimeout: t.idle}
}

// pprofRoutes are net/http/pprof's handlers, served only with
// --web.enable-pprof: importing the package for its side effect would put
// them on http.DefaultServeMux, which this server does not use anyway.
func pprofRoutes() []route {
	return []route{
		{path: "/debug/pprof/", handler: http.HandlerFunc(pprof.Index)},
		{path: "/debug/pprof/cmdline", handler: http.HandlerFunc(pprof.Cmdline)},
		{path: "/debug/pprof/profile", handler: http.HandlerFunc(pprof.Profile)},
		{path: "/debug/pprof/symbol", handler: http.HandlerFunc(pprof.Symbol)},
		{path: "/debug/pprof/trace", handler: http.HandlerFunc(pprof.Trace)},
	}
}
