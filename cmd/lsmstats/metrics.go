package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"sync"
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
// statistics metrics (stats.Metrics) and the truth the command computes
// beside the job (truthGauge).
type jobMetrics struct {
	srv  *http.Server
	done chan struct{}
}

var metricsTimeout = 5 * time.Second

// serveMetrics serves the job's and the store's metrics on the listener in
// f (a file descriptor the supervisor passed) until close.
func serveMetrics(f *os.File, store *lsm.Store, job *backfill.Job, truth *truthGauge) (*jobMetrics, error) {
	l, err := net.FileListener(f)
	_ = f.Close() // FileListener holds its own duplicate
	if err != nil {
		return nil, errors.Wrap(err, "metrics listener (file descriptor 3)")
	}
	m := &jobMetrics{done: make(chan struct{})}
	reg := prometheus.NewRegistry()
	reg.MustRegister(backfill.NewCollector(job, nil))
	reg.MustRegister(stats.NewMetrics(store.Stats, nil), store.Collector(nil), truth)
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

// truthGauge is the last truth the worker computed, and its barrier: the
// truth comes after its checkpoint (computed beside the job), so the job's
// own lsmstats_backfill_truth_ratio has none, and the barrier says which
// checkpoint this one is of. Safe for concurrent use.
type truthGauge struct {
	mu      sync.Mutex
	ok      bool
	barrier uint64
	ratio   float64

	ratioDesc, barrierDesc *prometheus.Desc
}

func newTruthGauge() *truthGauge {
	return &truthGauge{
		ratioDesc: prometheus.NewDesc("lsmstats_cli_truth_ratio",
			"The truth of the checkpoint lsmstats_cli_truth_barrier, computed beside the job: live rows behind the cursors over live rows, 0 to 1.", nil, nil),
		barrierDesc: prometheus.NewDesc("lsmstats_cli_truth_barrier", "The checkpoint barrier of lsmstats_cli_truth_ratio.", nil, nil),
	}
}

// set takes a checkpoint's truth, in percent.
func (g *truthGauge) set(barrier uint64, pct float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ok && barrier < g.barrier {
		return
	}
	g.ok, g.barrier, g.ratio = true, barrier, pct/100
}

// Describe implements prometheus.Collector.
func (g *truthGauge) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.ratioDesc
	ch <- g.barrierDesc
}

// Collect implements prometheus.Collector: nothing before the first truth.
func (g *truthGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	ok, barrier, ratio := g.ok, g.barrier, g.ratio
	g.mu.Unlock()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(g.ratioDesc, prometheus.GaugeValue, ratio)
	ch <- prometheus.MustNewConstMetric(g.barrierDesc, prometheus.GaugeValue, float64(barrier))
}
