package main

import (
	"context"
	"math"
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
// (backfill --metrics-addr), beside the store's statistics metrics
// (stats.Metrics). It is a Collector over the last checkpoint record: every
// scrape sees the figures of one checkpoint, never half of two.
//
// Exported, under lsmstats_backfill_:
//
//	progress_ratio{approach}        the raw figure, 0 to 1
//	progress_lower_ratio{approach}  its bounds, for approaches that give them
//	progress_upper_ratio{approach}
//	displayed_progress_ratio{approach}  the figure shown (high-water mark)
//	truth_ratio                     the truth, when an oracle knows it
//	eta_seconds, eta_lower_seconds, eta_upper_seconds
//	                                the ETA and its interval (absent while it
//	                                warms up; 0 once finished; +Inf if unbounded)
//	snapshot_rows_total             snapshot rows read
//	snapshot_read_rate_rows_per_second  the ETA's smoothed read rate
//	upstream_churn_rows_per_second  net rows/s the upstream adds ahead of
//	                                the cursors
//	rate_limit_rows_per_second      the limit in force (0: none)
//	checkpoint_barrier              the record's checkpoint barrier
//	finished                        1 once every vnode finished
type jobMetrics struct {
	mu  sync.Mutex
	rec *backfill.Record

	srv  *http.Server
	done chan struct{}
}

var (
	descProgress   = backfillDesc("progress_ratio", "Progress of the backfill by an approach's raw figure, 0 to 1.", "approach")
	descLower      = backfillDesc("progress_lower_ratio", "Lower bound of the approach's figure, 0 to 1.", "approach")
	descUpper      = backfillDesc("progress_upper_ratio", "Upper bound of the approach's figure, 0 to 1.", "approach")
	descDisplayed  = backfillDesc("displayed_progress_ratio", "The figure displayed (never decreasing within a job), 0 to 1.", "approach")
	descTruth      = backfillDesc("truth_ratio", "The truth: live rows behind the cursors over live rows, 0 to 1.")
	descETA        = backfillDesc("eta_seconds", "Forecast time the backfill has left.")
	descETALow     = backfillDesc("eta_lower_seconds", "Lower end of the ETA's interval.")
	descETAHigh    = backfillDesc("eta_upper_seconds", "Upper end of the ETA's interval.")
	descRows       = backfillDesc("snapshot_rows_total", "Snapshot rows the backfill read.")
	descRate       = backfillDesc("snapshot_read_rate_rows_per_second", "Smoothed snapshot read rate.")
	descChurn      = backfillDesc("upstream_churn_rows_per_second", "Net rows per second the upstream adds ahead of the cursors.")
	descRateLimit  = backfillDesc("rate_limit_rows_per_second", "The snapshot read limit in force; 0 is none.")
	descBarrier    = backfillDesc("checkpoint_barrier", "The checkpoint barrier of the figures.")
	descFinished   = backfillDesc("finished", "1 once every vnode of the backfill finished.")
	metricsTimeout = 5 * time.Second
)

func backfillDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName("lsmstats", "backfill", name), help, labels, nil)
}

// serveMetrics serves the job's and the store's metrics on the listener in
// f (a file descriptor the supervisor passed) until close.
func serveMetrics(f *os.File, store *lsm.Store) (*jobMetrics, error) {
	l, err := net.FileListener(f)
	_ = f.Close() // FileListener holds its own duplicate
	if err != nil {
		return nil, errors.Wrap(err, "metrics listener (file descriptor 3)")
	}
	m := &jobMetrics{done: make(chan struct{})}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	reg.MustRegister(stats.NewMetrics(store.Stats, nil))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: metricsTimeout}
	go func() {
		defer close(m.done)
		_ = m.srv.Serve(l)
	}()
	return m, nil
}

// update makes r the record the metrics show (m may be nil: no metrics).
func (m *jobMetrics) update(r backfill.Record) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.rec = &r
	m.mu.Unlock()
}

func (m *jobMetrics) close() {
	ctx, cancel := context.WithTimeout(context.Background(), metricsTimeout)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
	<-m.done
}

// Describe implements prometheus.Collector.
func (m *jobMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descProgress, descLower, descUpper, descDisplayed, descTruth, descETA, descETALow,
		descETAHigh, descRows, descRate, descChurn, descRateLimit, descBarrier, descFinished} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *jobMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	r := m.rec
	m.mu.Unlock()
	if r == nil {
		return // no checkpoint yet
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, f := range r.Figures {
		gauge(descProgress, f.Raw/100, f.Approach)
		gauge(descDisplayed, f.Pct/100, f.Approach)
		if f.Bounds != nil {
			gauge(descLower, f.Bounds.Lower/100, f.Approach)
			gauge(descUpper, f.Bounds.Upper/100, f.Approach)
		}
	}
	if r.Truth >= 0 {
		gauge(descTruth, r.Truth/100)
	}
	if rem, lo, hi := r.ETA.Seconds(); !math.IsNaN(rem) {
		gauge(descETA, rem)
		gauge(descETALow, lo)
		gauge(descETAHigh, hi)
	}
	ch <- prometheus.MustNewConstMetric(descRows, prometheus.CounterValue, float64(r.SnapshotRows))
	gauge(descRate, r.ETA.Rate)
	gauge(descChurn, r.ETA.Churn)
	gauge(descRateLimit, r.RateLimit)
	gauge(descBarrier, float64(r.Barrier))
	finished := 0.0
	if r.Finished {
		finished = 1
	}
	gauge(descFinished, finished)
}
