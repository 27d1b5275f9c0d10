//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/uber-go/tally/v4"
	"github.com/uber-go/tally/v4/prometheus"
	"go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"
)

// serveMetrics exposes Prometheus metrics on addr at /metrics: the SDK's own (polls, task latencies, ...)
// and clusterrun's (tasks running, starts, restarts, exits by code, barrier waits), through one handler.
// An empty addr turns metrics off.
func serveMetrics(addr string) (client.MetricsHandler, io.Closer, error) {
	if addr == "" {
		return client.MetricsNopHandler, io.NopCloser(nil), nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-addr %s: %w (give HOST:PORT or :PORT of a free port, e.g. :9464)", addr, err)
	}
	reporter := prometheus.NewReporter(prometheus.Options{})
	scope, scopeCloser := tally.NewRootScope(tally.ScopeOptions{
		CachedReporter:  reporter,
		Separator:       prometheus.DefaultSeparator,
		SanitizeOptions: &sanitize,
	}, time.Second)
	scope = sdktally.NewPrometheusNamingScope(scope)
	mux := http.NewServeMux()
	mux.Handle("/metrics", reporter.HTTPHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return sdktally.NewMetricsHandler(scope), closers{srv, scopeCloser}, nil
}

// sanitize is the SDK's Prometheus sanitizing for metric and label names, but label values keep '-' and '.':
// host names like gpu-a stay readable (Prometheus allows any text in a label value).
var sanitize = func() tally.SanitizeOptions {
	o := sdktally.PrometheusSanitizeOptions
	o.ValueCharacters = tally.ValidCharacters{
		Ranges:     tally.AlphanumericRange,
		Characters: append(append([]rune{}, tally.UnderscoreCharacters...), '-', '.'),
	}
	return o
}()

type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
