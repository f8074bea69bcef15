package cluster

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// published is what the coordinator's collector exports: a copy taken at
// each checkpoint and event, so that a scrape never waits for a step.
type published struct {
	mu      sync.Mutex
	ckp     *Checkpoint
	vnodes  map[string][]Range
	moves   int
	losses  int
	retries int
	copied  int64
	shared  int64
}

// publish copies what the collector exports.
func (c *Coordinator) publish() {
	c.pub.mu.Lock()
	defer c.pub.mu.Unlock()
	c.pub.ckp = c.lastCkp
	c.pub.vnodes = c.Vnodes()
	c.pub.moves, c.pub.losses, c.pub.retries = len(c.moves), len(c.losses), c.retries
	c.pub.copied, c.pub.shared = 0, 0
	for _, m := range c.moves {
		c.pub.copied += m.Stats.CopiedBytes
		c.pub.shared += m.Stats.SharedBytes
	}
}

var (
	descPercent = prometheus.NewDesc("lsmstats_cluster_progress_percent",
		"The job's progress over every node, in percent: raw (Σ consumed / Σ total) and shown (the displayed high-water mark).",
		[]string{"approach", "kind"}, nil)
	descRows = prometheus.NewDesc("lsmstats_cluster_progress_rows",
		"The job's Σ consumed and Σ total over every node, per approach (rows; the row-count approach's total is the key count).",
		[]string{"approach", "kind"}, nil)
	descTruth = prometheus.NewDesc("lsmstats_cluster_truth_percent",
		"The truth at the last checkpoint (a scan of every node's vnodes), when the coordinator asks for it.", nil, nil)
	descStep = prometheus.NewDesc("lsmstats_cluster_checkpoint_step",
		"The step of the last cluster checkpoint (every node committed it).", nil, nil)
	descETA = prometheus.NewDesc("lsmstats_cluster_eta_seconds",
		"The forecast time left, and its interval (kind: remaining, low, high); absent while no forecast is shown.", []string{"kind"}, nil)
	descVnodes = prometheus.NewDesc("lsmstats_cluster_node_vnodes",
		"The vnodes each node owns.", []string{"node"}, nil)
	descEvents = prometheus.NewDesc("lsmstats_cluster_events_total",
		"The coordinator's events: vnode moves, node losses recovered, barrier calls asked again after a lost answer.", []string{"event"}, nil)
	descMoved = prometheus.NewDesc("lsmstats_cluster_moved_bytes_total",
		"The bytes the moves took by reference (shared SSTs) and copied.", []string{"how"}, nil)
)

// Collector returns a Prometheus collector of the coordinator's figures:
// the job's progress summed over the nodes, the truth, the ETA, each
// node's vnodes and the moves and losses. It is safe for concurrent use
// with the coordinator.
func (c *Coordinator) Collector() prometheus.Collector { return collector{c} }

type collector struct{ c *Coordinator }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPercent, descRows, descTruth, descStep, descETA, descVnodes, descEvents, descMoved} {
		ch <- d
	}
}

func (k collector) Collect(ch chan<- prometheus.Metric) {
	p := &k.c.pub
	p.mu.Lock()
	defer p.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	if ckp := p.ckp; ckp != nil {
		for name, f := range ckp.Figures {
			gauge(descPercent, f.Raw, name, "raw")
			gauge(descPercent, f.Shown, name, "shown")
			gauge(descRows, f.Consumed, name, "consumed")
			gauge(descRows, f.Total, name, "total")
		}
		if ckp.Truth >= 0 {
			gauge(descTruth, ckp.Truth)
		}
		gauge(descStep, float64(ckp.Step))
		if ckp.ETA.Shown() {
			gauge(descETA, ckp.ETA.Remaining.Seconds(), "remaining")
			gauge(descETA, ckp.ETA.Low.Seconds(), "low")
			gauge(descETA, ckp.ETA.High.Seconds(), "high")
		}
	}
	for name, rs := range p.vnodes {
		n := 0
		for _, r := range rs {
			n += r.Hi - r.Lo
		}
		gauge(descVnodes, float64(n), name)
	}
	counter(descEvents, float64(p.moves), "move")
	counter(descEvents, float64(p.losses), "node_loss")
	counter(descEvents, float64(p.retries), "barrier_retry")
	counter(descMoved, float64(p.shared), "by_reference")
	counter(descMoved, float64(p.copied), "copied")
}
