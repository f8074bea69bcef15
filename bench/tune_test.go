package bench

import (
	"flag"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/lsmstats/lsmstats/lsm"
)

var scaleTune = flag.String("scale-tune", "", "experiment: k=v,... Pebble/store settings")

func tune(o *lsm.Options) {
	if *scaleTune == "" {
		return
	}
	kv := map[string]int64{}
	for _, f := range strings.Split(*scaleTune, ",") {
		k, v, _ := strings.Cut(f, "=")
		n, _ := strconv.ParseInt(v, 10, 64)
		kv[k] = n
	}
	if v, ok := kv["stop"]; ok {
		o.L0StopSublevels = int(v)
	}
	if v, ok := kv["cache"]; ok {
		o.CacheSize = v << 20
	}
	if v, ok := kv["partition"]; ok {
		o.PartitionBytes = v
	}
	if v, ok := kv["batch"]; ok {
		o.CommitBatchBytes = v
	}
	o.Pebble = func(p *pebble.Options) {
		if v, ok := kv["memtable"]; ok {
			p.MemTableSize = uint64(v) << 20
		}
		if v, ok := kv["l0"]; ok {
			p.L0CompactionThreshold = int(v)
		}
		if v, ok := kv["l0files"]; ok {
			p.L0CompactionFileThreshold = int(v)
		}
		if v, ok := kv["lbase"]; ok {
			p.LBaseMaxBytes = v << 20
		}
		if v, ok := kv["target"]; ok {
			p.TargetFileSizes[0] = v << 20
			for i := 1; i < len(p.TargetFileSizes); i++ {
				p.TargetFileSizes[i] = p.TargetFileSizes[i-1] * 2
			}
		}
		if v, ok := kv["conc"]; ok {
			p.CompactionConcurrencyRange = func() (int, int) { return 1, int(v) }
		}
		if v, ok := kv["minlz"]; ok && v > 0 {
			for i := range p.Levels {
				p.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.FastestCompression }
			}
		}
		if v, ok := kv["l0conc"]; ok {
			p.Experimental.L0CompactionConcurrency = int(v)
		}
		if v, ok := kv["mult"]; ok {
			p.Experimental.LevelMultiplier = int(v)
		}
	}
}
