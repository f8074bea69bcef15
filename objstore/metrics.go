package objstore

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind is a kind of S3 request a Bucket makes.
type Kind int

// The kinds of requests, as Stats and the metrics' kind label name them.
const (
	KindGet               Kind = iota // ranged GET: ObjectReader.ReadAt
	KindHead                          // HEAD object: ReadObject, Size
	KindPut                           // PUT of a whole object: CreateObject's writer
	KindCreateMultipart               // multipart upload: start
	KindUploadPart                    // multipart upload: one part
	KindCompleteMultipart             // multipart upload: end
	KindAbortMultipart                // multipart upload: abandoned
	KindList                          // ListObjectsV2 page: List, Check
	KindDelete                        // DELETE object
	numKinds
)

var kindNames = [numKinds]string{"get", "head", "put", "create_multipart", "upload_part",
	"complete_multipart", "abort_multipart", "list", "delete"}

// String returns the kind's label value: "get", "upload_part", ...
func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return "unknown"
	}
	return kindNames[k]
}

// Kinds returns every kind of request, in the order of the constants.
func Kinds() []Kind {
	ks := make([]Kind, numKinds)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

// KindStats are the counters of one kind of request, cumulative since the
// Bucket was made.
type KindStats struct {
	// Requests counts the HTTP requests sent, retries included; Retries
	// those that were retries.
	Requests, Retries int64
	// Errors counts the requests that failed after their retries, but
	// those that found no such object, which NotFound counts.
	Errors, NotFound int64
	// Bytes counts the bytes of object data of the requests that
	// succeeded: sent for puts and parts, received for gets.
	Bytes int64
	// Latency is the total time of the attempts.
	Latency time.Duration
}

func (s *KindStats) add(o KindStats) {
	s.Requests += o.Requests
	s.Retries += o.Retries
	s.Errors += o.Errors
	s.NotFound += o.NotFound
	s.Bytes += o.Bytes
	s.Latency += o.Latency
}

// Stats are a Bucket's counters per kind of request (Bucket.Stats).
type Stats struct {
	kinds [numKinds]KindStats
}

// Of returns the counters of kind k (zero for an unknown kind).
func (s Stats) Of(k Kind) KindStats {
	if k < 0 || k >= numKinds {
		return KindStats{}
	}
	return s.kinds[k]
}

// Total returns the counters of all kinds added up.
func (s Stats) Total() KindStats {
	var t KindStats
	for _, k := range s.kinds {
		t.add(k)
	}
	return t
}

// Sub returns the counters of s less those of an earlier snapshot.
func (s Stats) Sub(earlier Stats) Stats {
	for i := range s.kinds {
		a, b := &s.kinds[i], earlier.kinds[i]
		a.Requests -= b.Requests
		a.Retries -= b.Retries
		a.Errors -= b.Errors
		a.NotFound -= b.NotFound
		a.Bytes -= b.Bytes
		a.Latency -= b.Latency
	}
	return s
}

// metrics are a Bucket's counters, updated with atomics, and its latency
// histogram.
type metrics struct {
	requests, retries, bytes, latencyNanos [numKinds]atomic.Int64
	errors                                 [numKinds][numClasses]atomic.Int64
	latency                                *prometheus.HistogramVec

	requestsDesc, retriesDesc, bytesDesc, errorsDesc *prometheus.Desc
}

func newMetrics() *metrics {
	return &metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lsmstats_objstore_request_duration_seconds",
			Help: "Time of each S3 request attempt, from sending it to the end of its answer, by kind of request.",
			// 1ms to about 33s.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"kind"}),
		requestsDesc: prometheus.NewDesc("lsmstats_objstore_requests_total",
			"S3 requests sent, retries included, by kind of request.", []string{"kind"}, nil),
		retriesDesc: prometheus.NewDesc("lsmstats_objstore_retries_total",
			"S3 requests that were retries of one that failed (throttled, 5xx, timed out, connection failed).", []string{"kind"}, nil),
		bytesDesc: prometheus.NewDesc("lsmstats_objstore_bytes_total",
			"Bytes of object data moved by the S3 requests that succeeded: sent by puts and parts, received by gets.", []string{"kind"}, nil),
		errorsDesc: prometheus.NewDesc("lsmstats_objstore_errors_total",
			"S3 operations that failed after their retries, by kind of request and class of failure.", []string{"kind", "class"}, nil),
	}
}

// attempt records one attempt of kind k that took d and, if it succeeded,
// moved n bytes.
func (m *metrics) attempt(k Kind, retry bool, d time.Duration, n int64, ok bool) {
	m.requests[k].Add(1)
	if retry {
		m.retries[k].Add(1)
	}
	if ok {
		m.bytes[k].Add(n)
	}
	m.latencyNanos[k].Add(int64(d))
	m.latency.WithLabelValues(kindNames[k]).Observe(d.Seconds())
}

func (m *metrics) failed(k Kind, cl class) { m.errors[k][cl].Add(1) }

func (m *metrics) stats() Stats {
	var s Stats
	for k := range s.kinds {
		ks := &s.kinds[k]
		ks.Requests = m.requests[k].Load()
		ks.Retries = m.retries[k].Load()
		ks.Bytes = m.bytes[k].Load()
		ks.Latency = time.Duration(m.latencyNanos[k].Load())
		for cl := range numClasses {
			if cl == classNotFound {
				ks.NotFound += m.errors[k][cl].Load()
			} else {
				ks.Errors += m.errors[k][cl].Load()
			}
		}
	}
	return s
}

// Describe is part of prometheus.Collector.
func (b *Bucket) Describe(ch chan<- *prometheus.Desc) {
	m := b.m
	ch <- m.requestsDesc
	ch <- m.retriesDesc
	ch <- m.bytesDesc
	ch <- m.errorsDesc
	m.latency.Describe(ch)
}

// Collect is part of prometheus.Collector: the Bucket's counters
// (lsmstats_objstore_requests_total, _retries_total, _bytes_total,
// _errors_total) and its latency histogram
// (lsmstats_objstore_request_duration_seconds). The metrics carry no label
// that tells two Buckets apart: register each of several with
// prometheus.WrapRegistererWith and labels of the caller's choice.
func (b *Bucket) Collect(ch chan<- prometheus.Metric) {
	m := b.m
	for k := range numKinds {
		kind := kindNames[k]
		ch <- prometheus.MustNewConstMetric(m.requestsDesc, prometheus.CounterValue, float64(m.requests[k].Load()), kind)
		ch <- prometheus.MustNewConstMetric(m.retriesDesc, prometheus.CounterValue, float64(m.retries[k].Load()), kind)
		ch <- prometheus.MustNewConstMetric(m.bytesDesc, prometheus.CounterValue, float64(m.bytes[k].Load()), kind)
		for cl := range numClasses {
			ch <- prometheus.MustNewConstMetric(m.errorsDesc, prometheus.CounterValue, float64(m.errors[k][cl].Load()), kind, classNames[cl])
		}
	}
	m.latency.Collect(ch)
}
