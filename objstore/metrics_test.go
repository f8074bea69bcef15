package objstore_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/lsmstats/lsmstats/objstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// The collector exports what Stats says: requests, retries, bytes and
// errors by kind (and class), and a latency histogram; two Buckets register
// side by side under labels of the caller's.
func TestMetrics(t *testing.T) {
	b, p, _ := proxied(t)
	rng := rand.New(rand.NewPCG(17, 18))
	p.add("slowdown", isPut, 1)
	require.NoError(t, writeObject(t, b, rng, "a", randomBytes(rng, 5000)))
	require.NoError(t, writeObject(t, b, rng, "b", randomBytes(rng, int(objstore.MinPartSize)+1)))
	_, err := readObject(t, b, "a")
	require.NoError(t, err)
	_, err = b.Size("missing")
	require.True(t, b.IsNotExistError(err))
	p.add("denied", func(r *http.Request) bool { return r.Method == http.MethodDelete }, 1)
	require.Error(t, b.Delete("a"))
	_, err = b.List("", "")
	require.NoError(t, err)
	require.NoError(t, b.Check(context.Background()))

	// Every HTTP request the Bucket sent is counted, and nothing else.
	require.Equal(t, int64(p.seen()), b.Stats().Total().Requests)

	problems, err := testutil.CollectAndLint(b)
	require.NoError(t, err)
	require.Empty(t, problems)

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, prometheus.WrapRegistererWith(prometheus.Labels{"store": "one"}, reg).Register(b))
	other, err := objstore.New(b.Config())
	require.NoError(t, err)
	defer other.Close()
	require.NoError(t, prometheus.WrapRegistererWith(prometheus.Labels{"store": "two"}, reg).Register(other))
	families, err := reg.Gather()
	require.NoError(t, err)

	type key struct{ name, store, kind, class string }
	values := map[key]float64{}
	histCounts := map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			k := key{name: f.GetName()}
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "store":
					k.store = l.GetValue()
				case "kind":
					k.kind = l.GetValue()
				case "class":
					k.class = l.GetValue()
				}
			}
			if h := m.GetHistogram(); h != nil {
				if k.store == "one" {
					histCounts[k.kind] = h.GetSampleCount()
				}
				continue
			}
			values[k] = m.GetCounter().GetValue()
		}
	}
	s := b.Stats()
	for _, kind := range objstore.Kinds() {
		ks := s.Of(kind)
		name := kind.String()
		require.Equal(t, float64(ks.Requests), values[key{"lsmstats_objstore_requests_total", "one", name, ""}], name)
		require.Equal(t, float64(ks.Retries), values[key{"lsmstats_objstore_retries_total", "one", name, ""}], name)
		require.Equal(t, float64(ks.Bytes), values[key{"lsmstats_objstore_bytes_total", "one", name, ""}], name)
		require.Equal(t, uint64(ks.Requests), histCounts[name], name)
		require.Zero(t, values[key{"lsmstats_objstore_requests_total", "two", name, ""}], name)
	}
	require.Equal(t, int64(2), s.Of(objstore.KindPut).Requests) // "b" is a multipart upload
	require.Equal(t, int64(1), s.Of(objstore.KindPut).Retries)
	require.Equal(t, int64(5000), s.Of(objstore.KindPut).Bytes)
	require.Equal(t, float64(1), values[key{"lsmstats_objstore_errors_total", "one", "head", "not_found"}])
	require.Equal(t, float64(1), values[key{"lsmstats_objstore_errors_total", "one", "delete", "access_denied"}])
	require.Equal(t, int64(1), s.Of(objstore.KindHead).NotFound)
	require.Equal(t, int64(1), s.Of(objstore.KindDelete).Errors)
	require.Equal(t, int64(2), s.Total().Errors+s.Total().NotFound)
	require.Positive(t, s.Total().Latency)
}
