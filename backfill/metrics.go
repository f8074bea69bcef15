package backfill

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Progress returns the job's progress as of its last checkpoint: the
// checkpoint's Record (the displayed figure of each estimator with its raw
// consumed and total rows and its bounds, Record.Displayed; each vnode's
// state in Vnodes and its consumed rows, bounds and live rows in
// Estimates), or the figure recovered when the job was opened. ok is false
// until the backfill has a figure. Safe to call while Run runs (from a
// metrics scrape, say); the record is the caller's.
func (j *Job) Progress() (rec Record, ok bool) {
	j.lastMu.Lock()
	defer j.lastMu.Unlock()
	if j.last == nil {
		return Record{}, false
	}
	return *j.last, true
}

// setLast makes rec what Progress returns.
func (j *Job) setLast(rec Record) {
	j.lastMu.Lock()
	j.last = &rec
	j.lastMu.Unlock()
}

// Displayed returns the record's headline figure: that of the first
// estimator with bounds (an Accountant: Stats by default), else the first
// estimator's. Its Pct and Shown are what is displayed; Consumed and Total
// the estimator's rows.
func (r Record) Displayed() Figure {
	for _, f := range r.Figures {
		if f.Bounds != nil {
			return f
		}
	}
	if len(r.Figures) > 0 {
		return r.Figures[0]
	}
	return Figure{}
}

// CollectorOptions configure a job's Prometheus collector.
type CollectorOptions struct {
	// ConstLabels are added to every metric, e.g. {"job": "orders_mv"} to
	// tell apart the jobs of one registry.
	ConstLabels prometheus.Labels
	// Vnodes adds the per-vnode metrics (four series per vnode).
	Vnodes bool
}

// NewCollector returns a Prometheus collector of a job's progress: each
// scrape shows the figures of one checkpoint (Job.Progress), never half of
// two, and nothing before the first. Metrics, under lsmstats_backfill_:
//
//	progress_ratio{approach}        the raw figure, 0 to 1
//	progress_lower_ratio{approach}  its bounds, for approaches that give them
//	progress_upper_ratio{approach}
//	displayed_progress_ratio{approach}  the figure shown (high-water mark)
//	consumed_rows{approach}, total_rows{approach}
//	                                the estimator's consumed and total rows
//	truth_ratio                     the truth, when JobConfig.Score sets it
//	eta_seconds, eta_lower_seconds, eta_upper_seconds
//	                                the ETA and its interval (absent while it
//	                                warms up; 0 once finished; +Inf if unbounded)
//	snapshot_rows_total             snapshot rows read
//	snapshot_read_rate_rows_per_second  the read rate the ETA forecasts with
//	upstream_churn_rows_per_second  net rows/s the upstream adds ahead of
//	                                the cursors
//	rate_limit_rows_per_second      the limit in force (0: none)
//	checkpoint_barrier              the record's checkpoint barrier
//	finished                        1 once every vnode finished
//
//	upstream_progress_ratio{approach,upstream}
//	                                each upstream table's raw figure, in a
//	                                job over several (upstream: the table id)
//	phase{phase}                    1 for a snapshot backfill's phase
//	                                (snapshot, log store, joined)
//	log_consumed_rows, log_pending_rows
//	                                a snapshot backfill's log rows consumed
//	                                and still in the log store
//
// and with CollectorOptions.Vnodes, the first Accountant's account of each
// vnode: vnode_consumed_rows{vnode}, vnode_lower_rows{vnode},
// vnode_upper_rows{vnode}, vnode_total_rows{vnode} (in a job over several
// upstream tables, the vnodes of upstream i > 0 are labelled "i:vnode").
func NewCollector(j *Job, opts *CollectorOptions) prometheus.Collector {
	if opts == nil {
		opts = &CollectorOptions{}
	}
	c := &collector{j: j, vnodes: opts.Vnodes}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("lsmstats", "backfill", name), help, labels, opts.ConstLabels)
	}
	c.progress = d("progress_ratio", "Progress of the backfill by an approach's raw figure, 0 to 1.", "approach")
	c.lower = d("progress_lower_ratio", "Lower bound of the approach's figure, 0 to 1.", "approach")
	c.upper = d("progress_upper_ratio", "Upper bound of the approach's figure, 0 to 1.", "approach")
	c.displayed = d("displayed_progress_ratio", "The figure displayed (never decreasing within a job), 0 to 1.", "approach")
	c.consumed = d("consumed_rows", "Rows the approach counts as consumed.", "approach")
	c.total = d("total_rows", "Rows the approach counts in total.", "approach")
	c.truth = d("truth_ratio", "The truth: live rows behind the cursors over live rows, 0 to 1.")
	c.eta = d("eta_seconds", "Forecast time the backfill has left.")
	c.etaLow = d("eta_lower_seconds", "Lower end of the ETA's interval.")
	c.etaHigh = d("eta_upper_seconds", "Upper end of the ETA's interval.")
	c.rows = d("snapshot_rows_total", "Snapshot rows the backfill read.")
	c.rate = d("snapshot_read_rate_rows_per_second", "Snapshot read rate the ETA forecasts with (rows/s).")
	c.churn = d("upstream_churn_rows_per_second", "Net rows per second the upstream adds ahead of the cursors.")
	c.limit = d("rate_limit_rows_per_second", "The snapshot read limit in force; 0 is none.")
	c.barrier = d("checkpoint_barrier", "The checkpoint barrier of the figures.")
	c.finished = d("finished", "1 once every vnode of the backfill finished.")
	c.upstream = d("upstream_progress_ratio", "Progress of one upstream table of a job over several, by an approach's raw figure, 0 to 1.", "approach", "upstream")
	c.phase = d("phase", "1 for the phase a snapshot backfill is in.", "phase")
	c.logConsumed = d("log_consumed_rows", "Log-store rows a snapshot backfill consumed.")
	c.logPending = d("log_pending_rows", "Rows a snapshot backfill's log store holds, still to consume.")
	c.vConsumed = d("vnode_consumed_rows", "Estimated live rows at or below the vnode's cursor.", "vnode")
	c.vLower = d("vnode_lower_rows", "Lower bound of the vnode's consumed rows.", "vnode")
	c.vUpper = d("vnode_upper_rows", "Upper bound of the vnode's consumed rows.", "vnode")
	c.vTotal = d("vnode_total_rows", "Live rows of the vnode.", "vnode")
	return c
}

type collector struct {
	j      *Job
	vnodes bool

	progress, lower, upper, displayed, consumed, total, truth, eta, etaLow, etaHigh,
	rows, rate, churn, limit, barrier, finished, vConsumed, vLower, vUpper, vTotal *prometheus.Desc
	upstream, phase, logConsumed, logPending *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.progress, c.lower, c.upper, c.displayed, c.consumed, c.total, c.truth,
		c.eta, c.etaLow, c.etaHigh, c.rows, c.rate, c.churn, c.limit, c.barrier, c.finished,
		c.upstream, c.phase, c.logConsumed, c.logPending} {
		ch <- d
	}
	if c.vnodes {
		for _, d := range []*prometheus.Desc{c.vConsumed, c.vLower, c.vUpper, c.vTotal} {
			ch <- d
		}
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	r, ok := c.j.Progress()
	if !ok {
		return // no checkpoint yet
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, f := range r.Figures {
		gauge(c.progress, f.Raw/100, f.Approach)
		gauge(c.displayed, f.Pct/100, f.Approach)
		gauge(c.consumed, f.Consumed, f.Approach)
		gauge(c.total, f.Total, f.Approach)
		if f.Bounds != nil {
			gauge(c.lower, f.Bounds.Lower/100, f.Approach)
			gauge(c.upper, f.Bounds.Upper/100, f.Approach)
		}
	}
	if r.Truth >= 0 {
		gauge(c.truth, r.Truth/100)
	}
	if rem, lo, hi := r.ETA.Seconds(); !math.IsNaN(rem) {
		gauge(c.eta, rem)
		gauge(c.etaLow, lo)
		gauge(c.etaHigh, hi)
	}
	ch <- prometheus.MustNewConstMetric(c.rows, prometheus.CounterValue, float64(r.SnapshotRows))
	gauge(c.rate, r.ETA.Rate)
	gauge(c.churn, r.ETA.Churn)
	gauge(c.limit, r.RateLimit)
	gauge(c.barrier, float64(r.Barrier))
	finished := 0.0
	if r.Finished {
		finished = 1
	}
	gauge(c.finished, finished)
	if len(r.Upstreams) > 1 {
		for _, u := range r.Upstreams {
			for _, f := range u.Figures {
				gauge(c.upstream, f.Raw/100, f.Approach, strconv.FormatUint(uint64(u.Table), 10))
			}
		}
	}
	if r.Phase != "" {
		gauge(c.phase, 1, r.Phase)
		gauge(c.logConsumed, float64(r.LogConsumed))
		gauge(c.logPending, float64(r.LogPending))
	}
	if c.vnodes && len(r.Estimates) == len(r.Vnodes) {
		for i, v := range r.Vnodes {
			e, vn := r.Estimates[i], strconv.Itoa(int(v.Vnode))
			if v.Upstream > 0 {
				vn = strconv.Itoa(v.Upstream) + ":" + vn // a vnode of another upstream table
			}
			gauge(c.vConsumed, e.Consumed, vn)
			gauge(c.vLower, e.Lower, vn)
			gauge(c.vUpper, e.Upper, vn)
			gauge(c.vTotal, e.Total, vn)
		}
	}
}
