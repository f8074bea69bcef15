package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// jobMetrics serves the running job's progress as Prometheus metrics
// (backfill --metrics-addr): the job's own collector (backfill.NewCollector,
// whose comment lists the lsmstats_backfill_ metrics), beside the store's
// statistics metrics (stats.Metrics).
type jobMetrics struct {
	srv  *http.Server
	done chan struct{}
}

var metricsTimeout = 5 * time.Second

// serveMetrics serves the job's and the store's metrics on the listener in
// f (a file descriptor the supervisor passed) until close.
func serveMetrics(f *os.File, store *lsm.Store, job *backfill.Job) (*jobMetrics, error) {
	l, err := net.FileListener(f)
	_ = f.Close() // FileListener holds its own duplicate
	if err != nil {
		return nil, errors.Wrap(err, "metrics listener (file descriptor 3)")
	}
	m := &jobMetrics{done: make(chan struct{})}
	reg := prometheus.NewRegistry()
	reg.MustRegister(backfill.NewCollector(job, nil))
	reg.MustRegister(stats.NewMetrics(store.Stats, nil), store.Collector(nil))
	if c := store.ObjectStoreCollector(); c != nil {
		reg.MustRegister(c)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: metricsTimeout}
	go func() {
		defer close(m.done)
		_ = m.srv.Serve(l)
	}()
	return m, nil
}

func (m *jobMetrics) close() {
	ctx, cancel := context.WithTimeout(context.Background(), metricsTimeout)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
	<-m.done
}
