// Command rssfloor is the smallest NVML exporter this project's libraries
// make: kingpin flags, exporter-toolkit's web server, client_golang's
// registry with the Go and process collectors, and go-nvml reading each
// GPU's temperature and power at every scrape. It exists to be measured
// beside gpulink_exporter (bench/rss.sh): its resident memory is the
// floor any exporter built on these libraries with NVML in its process
// pays, so that the exporter's own share can be told from it.
package main

import (
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"
)

var (
	tempDesc  = prometheus.NewDesc("rssfloor_gpu_temperature_celsius", "GPU temperature.", []string{"gpu"}, nil)
	powerDesc = prometheus.NewDesc("rssfloor_gpu_power_watts", "GPU power draw.", []string{"gpu"}, nil)
)

// gpus reads every GPU through NVML at each collect.
type gpus struct{ lib nvml.Interface }

func (g gpus) Describe(ch chan<- *prometheus.Desc) { ch <- tempDesc; ch <- powerDesc }

func (g gpus) Collect(ch chan<- prometheus.Metric) {
	n, ret := g.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return
	}
	for i := range n {
		d, ret := g.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		label := strconv.Itoa(i)
		if t, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
			ch <- prometheus.MustNewConstMetric(tempDesc, prometheus.GaugeValue, float64(t), label)
		}
		if p, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
			ch <- prometheus.MustNewConstMetric(powerDesc, prometheus.GaugeValue, float64(p)/1000, label)
		}
	}
}

func main() {
	app := kingpin.New("rssfloor", "The smallest NVML exporter, to measure beside gpulink_exporter.")
	webConfig := kingpinflag.AddFlags(app, ":9836")
	kingpin.MustParse(app.Parse(os.Args[1:]))
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		logger.Error("NVML init", "ret", ret)
		os.Exit(1)
	}
	// Left loaded to the end: rss.sh stops it with a signal, and the exit
	// releases NVML.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), gpus{lib})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if err := web.ListenAndServe(&http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}, webConfig, logger); err != nil {
		logger.Error("serve", "err", err)
		os.Exit(1)
	}
}
