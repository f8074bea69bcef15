package main

import (
	"bufio"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// scrape is one scrape's samples, by name with labels
// (`lsmstats_backfill_progress_ratio{approach="stats"}`).
type scrape map[string]float64

func parseScrape(t *testing.T, body string) scrape {
	out := scrape{}
	for _, l := range strings.Split(body, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		require.Positive(t, i, "sample line %q", l)
		v, err := strconv.ParseFloat(l[i+1:], 64)
		require.NoError(t, err, "sample line %q", l)
		out[l[:i]] = v
	}
	return out
}

// TestMetricsScrape runs the backfill command with --metrics-addr on a
// loopback port it picks, scrapes it with a real HTTP client while the job
// runs, and checks every scrape against the checkpoint of the JSON report
// it names (lsmstats_backfill_checkpoint_barrier): the figures, the bounds,
// the truth, the ETA, the snapshot rows and the rate limit, which changes
// at 50%; and that the store's statistics metrics are served beside them.
func TestMetricsScrape(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "run.json")
	pr, pw := io.Pipe()
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		var errb strings.Builder
		code := run([]string{"backfill", "--workload", "update-churn", "--rows", "12000", "--vnodes", "16",
			"--actors", "2", "--chunk-size", "64", "--barrier-rows", "256", "--rate-limit", "8000",
			"--rate-change-at", "50:4000", "--metrics-addr", "127.0.0.1:0", "--json", jsonPath, "--bars", "off"},
			pw, &errb)
		_ = pw.Close()
		done <- result{code, errb.String()}
	}()
	// The address comes first on stdout; the rest is drained.
	sc := bufio.NewScanner(pr)
	var url string
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "metrics: "); ok {
			url = u
			break
		}
	}
	require.NotEmpty(t, url, "no metrics address on stdout")
	drained := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(pr)
		drained <- string(b)
	}()

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var scrapes []scrape
	var res result
	for running := true; running; {
		select {
		case res = <-done:
			running = false
		case <-time.After(50 * time.Millisecond):
			resp, err := client.Get(url)
			if err != nil {
				continue // the job may finish between the check and the scrape
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
			require.Equal(t, "text/plain; version=0.0.4; charset=utf-8; escaping=underscores", resp.Header.Get("Content-Type"))
			if s := parseScrape(t, string(body)); len(s) > 0 {
				scrapes = append(scrapes, s)
			}
		}
	}
	out := <-drained
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", out, res.stderr)

	var rep report
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Equal(t, strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics"), rep.MetricsAddr)
	byBarrier := map[uint64]barrierJSON{}
	for _, b := range rep.Barriers {
		byBarrier[b.Barrier] = b
	}

	barriers := map[float64]bool{}
	var withETA, withTruth, beforeChange, afterChange int
	for _, s := range scrapes {
		nb, ok := s["lsmstats_backfill_checkpoint_barrier"]
		if !ok {
			continue // served before the first checkpoint: store metrics only
		}
		barriers[nb] = true
		b, ok := byBarrier[uint64(nb)]
		require.True(t, ok, "scraped barrier %v is not in the JSON report", nb)
		eq := func(name string, want float64) {
			got, ok := s[name]
			require.True(t, ok, "barrier %v: %s missing", nb, name)
			require.InDelta(t, want, got, 1e-12, "barrier %v: %s", nb, name)
		}
		eq(`lsmstats_backfill_progress_ratio{approach="stats"}`, b.Stats/100)
		eq(`lsmstats_backfill_progress_ratio{approach="rowcount"}`, b.RowCount/100)
		eq(`lsmstats_backfill_progress_lower_ratio{approach="stats"}`, b.StatsBounds.Lower/100)
		eq(`lsmstats_backfill_progress_upper_ratio{approach="stats"}`, b.StatsBounds.Upper/100)
		// The truth comes beside the job, after its checkpoint: the
		// command's gauge says which barrier's it is. The job's own has
		// none.
		_, ok = s[`lsmstats_backfill_truth_ratio`]
		require.False(t, ok, "barrier %v: the job's record has a truth", nb)
		if tb, ok := s[`lsmstats_cli_truth_barrier`]; ok {
			withTruth++
			// A scrape reads the job's collector and the truth's gauge one
			// after the other, not at one instant: the job may commit,
			// and its truth arrive, in between, so the truth's barrier
			// may be the next one. It must be a barrier of the job.
			require.LessOrEqual(t, tb, nb+1, "a truth of a barrier beyond the next one")
			_, known := byBarrier[uint64(tb)]
			require.True(t, known, "the truth's barrier %v is a barrier of the job", tb)
			tr := byBarrier[uint64(tb)].Truth
			require.NotNil(t, tr, "barrier %v: its truth is in the JSON", tb)
			eq(`lsmstats_cli_truth_ratio`, *tr/100)
		}
		eq(`lsmstats_backfill_snapshot_rows_total`, float64(b.SnapshotRows))
		eq(`lsmstats_backfill_rate_limit_rows_per_second`, b.RateLimit)
		eq(`lsmstats_backfill_snapshot_read_rate_rows_per_second`, b.ETA.RowsPerS)
		eq(`lsmstats_backfill_upstream_churn_rows_per_second`, b.ETA.ChurnPerS)
		fin := 0.0
		if b.Finished {
			fin = 1
		}
		eq(`lsmstats_backfill_finished`, fin)
		if b.ETA.RemainingS >= 0 {
			withETA++
			eq(`lsmstats_backfill_eta_seconds`, b.ETA.RemainingS)
			eq(`lsmstats_backfill_eta_lower_seconds`, b.ETA.LowS)
			eq(`lsmstats_backfill_eta_upper_seconds`, b.ETA.HighS)
		} else {
			_, ok := s[`lsmstats_backfill_eta_seconds`]
			require.False(t, ok, "barrier %v: an ETA metric while the JSON has none", nb)
		}
		switch b.RateLimit {
		case 8000:
			beforeChange++
		case 4000:
			afterChange++
			require.GreaterOrEqual(t, b.Stats, 50.0)
		default:
			t.Fatalf("barrier %v: rate limit %v", nb, b.RateLimit)
		}
		// The store's statistics, served beside the job's.
		require.Positive(t, s[`lsmstats_table_live_rows{table="1"}`], "barrier %v", nb)
		require.GreaterOrEqual(t, s[`lsmstats_stats_committed_epoch`], float64(b.Epoch), "barrier %v", nb)
		// And its operational counters (Store.Collector).
		require.Positive(t, s[`lsmstats_store_commits_total`], "barrier %v", nb)
	}
	t.Logf("%d scrapes of %d barriers, %d with an ETA, %d with a truth, %d/%d before/after the rate change",
		len(scrapes), len(barriers), withETA, withTruth, beforeChange, afterChange)
	require.GreaterOrEqual(t, len(barriers), 3, "scrapes while the job ran")
	require.Positive(t, withETA, "a scrape with an ETA")
	require.Positive(t, withTruth, "a scrape with a truth")
	require.Positive(t, beforeChange+afterChange)
	require.False(t, math.IsNaN(rep.ETA.MedianErr))
}
