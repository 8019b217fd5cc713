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
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
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
