package lsm

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/sstable/block"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/stats"
)

// Stats returns the current statistics. Commit refreshes the physical
// statistics and publishes the live ones under one lock, so the two always
// describe the same checkpoint; compactions change the physical side in
// between (fewer entries for the same rows), never the live side.
//
// If the refresh at the end of a commit failed, PhysicalErr says so. The
// method is a stats.SnapshotFunc: stats.NewMetrics(store.Stats, nil)
// exports the statistics to Prometheus.
func (s *Store) Stats() stats.Snapshot {
	s.statsMu.RLock()
	defer s.statsMu.RUnlock()
	s.mu.Lock()
	live := s.mu.live.Current()
	s.mu.Unlock()
	// The error first: a refresh that succeeds in between then reports a
	// current Version as stale, never a stale one as current.
	perr := s.tracker.Err()
	// Package stats wraps the machinery's snapshots in values that only
	// read them (internal/statsinternal).
	return stats.Snapshot{
		CommittedEpoch: s.committed.Load(),
		Physical:       statsinternal.Version(s.tracker.Current()).(stats.Version),
		Live:           statsinternal.Live(live).(stats.Live),
		PhysicalErr:    perr,
	}
}

// RefreshStats brings the physical statistics up to date with the live SSTs
// now, after which Stats().PhysicalErr is nil, or returns why it cannot (an
// I/O error, or a corrupt SST, reading a new SST's properties). For callers
// that must not compute from physical statistics that lag behind the
// committed epoch.
func (s *Store) RefreshStats() error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	return s.tracker.Refresh()
}

// VerifyReport lists every difference and every corruption Verify found.
type VerifyReport struct {
	// Epoch is the committed epoch that was verified.
	Epoch uint64
	// Files is the number of live SSTs whose blocks were checked.
	Files int
	// Rows is the number of live rows scanned.
	Rows int64
	// Differences names each statistic that does not match its
	// recomputation. Empty when the store is consistent.
	Differences []string
	// Corrupt names each corrupt thing: an SST whose blocks fail their
	// checksums (with the block), or that cannot be opened, and each
	// metadata row that does not decode (with its key; a read-only store
	// opens past them). Empty when nothing is corrupt.
	Corrupt []string
	// Unchecked names each statistic that could not be checked because
	// what it counts could not be read (a corrupt SST in its range), with
	// the error that stopped its check.
	Unchecked []string
	// Notes are findings that are not differences: payloads rebuilt from
	// the SST's keys, tables whose live counts may contain estimates.
	Notes []string
}

// OK reports whether Verify found no difference and no corruption, and
// could check every statistic.
func (r VerifyReport) OK() bool {
	return len(r.Differences) == 0 && len(r.Corrupt) == 0 && len(r.Unchecked) == 0
}

// Verify recomputes every statistic from the data, as CockroachDB's
// consistency checker does, and reports each difference:
//
//   - physical: the incrementally kept per-(table, vnode) sums against a
//     recomputation from every live SST's properties, and for each SST the
//     identity Σ entries + tombstones + metadata + foreign + range deletions
//     == Pebble's NumEntries;
//   - live: every table's rows are scanned at the committed epoch and
//     compared with the live statistics, vnode by vnode and bucket by bucket
//     (a key of none of the shapes in a vnode's range is reported there);
//   - foreign keys: the keys of none of the shapes that the collector
//     counted in the live SSTs, and every key of the metadata range that is
//     not a metadata key.
//
// It also checks every block of every live SST against its checksum
// (Pebble's ValidateBlockChecksums) and goes on past corruption: each
// corrupt SST and metadata row is reported in Corrupt, and each statistic
// whose data could not be read in Unchecked, while the others are checked.
//
// The error is for failures to verify (I/O), not for differences or
// corruption.
func (s *Store) Verify() (VerifyReport, error) {
	if err := s.checkOpen(); err != nil {
		return VerifyReport{}, err
	}
	// Hold commits off so the physical and live sides describe one epoch.
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	// The recomputation reads SSTs: flush the checkpoints committed as
	// batches, whose summaries the refresh below then replaces by their
	// SSTs'.
	if !s.opts.ReadOnly {
		if err := s.flushUnflushed(); err != nil {
			return VerifyReport{}, errors.Wrap(err, "lsmstats: verify")
		}
	}
	snap, err := s.Snapshot()
	if err != nil {
		return VerifyReport{}, err
	}
	defer snap.Close()
	st := s.Stats()
	rep := VerifyReport{Epoch: snap.Epoch()}
	differ := func(format string, args ...any) {
		rep.Differences = append(rep.Differences, fmt.Sprintf(format, args...))
	}
	unchecked := func(format string, args ...any) {
		rep.Unchecked = append(rep.Unchecked, fmt.Sprintf(format, args...))
	}
	for _, err := range s.corruptMeta {
		rep.Corrupt = append(rep.Corrupt, fmt.Sprintf("metadata row: %v", err))
	}

	// Every block of every live SST.
	corrupt, files, err := s.checkFiles()
	if err != nil {
		return rep, err
	}
	rep.Files = files
	for _, c := range corrupt {
		rep.Corrupt = append(rep.Corrupt, fmt.Sprintf("sst %06d%s: %v", c.fileNum, s.where(c.fileNum), c.err))
	}

	// Physical: compactions may change the file set between the refresh and
	// the recomputation; retry until both saw the same files.
	var cur, re *ssttracker.Version
	var physErr error
	for attempt := 0; ; attempt++ {
		if physErr = s.tracker.Refresh(); physErr != nil {
			break
		}
		cur = s.tracker.Current()
		if re, physErr = s.tracker.Recompute(); physErr != nil {
			break
		}
		if sameFiles(cur, re) || attempt == 20 {
			break
		}
	}
	switch {
	case physErr != nil && lsmstats.IsCorruption(physErr):
		// The SST is among rep.Corrupt; the sums over it cannot be checked.
		unchecked("physical statistics: %v", physErr)
	case physErr != nil:
		return rep, physErr
	default:
		if err := ssttracker.DiffVersions(cur, re); err != nil {
			differ("physical statistics differ from a recomputation: %v", err)
		}
		for _, fi := range ssttracker.Files(re) {
			if err := ssttracker.CheckFile(fi); err != nil {
				differ("%v", err)
			}
		}
		for _, fe := range ssttracker.Rebuilt(re) {
			rep.Notes = append(rep.Notes, fmt.Sprintf("sst %06d: statistics rebuilt from its keys: %v", fe.FileNum, fe.Err))
		}

		// Keys of none of the shapes (not written by the store): the
		// collector counts them apart. A read of a vnode whose range holds
		// one fails, and the scans below name it; one in the metadata
		// range, or outside every table of the catalog, no read meets.
		var foreign uint64
		for _, fi := range ssttracker.Files(re) {
			if fi.Summary != nil {
				foreign += fi.Summary.Foreign
			}
		}
		if foreign > 0 {
			differ("the live SSTs hold %d keys of none of the key shapes", foreign)
		}
	}
	corruptRow := func(err error) { rep.Corrupt = append(rep.Corrupt, fmt.Sprintf("metadata row: %v", err)) }
	if err := s.verifyMeta(differ, corruptRow); err != nil {
		if !lsmstats.IsCorruption(err) {
			return rep, err
		}
		unchecked("metadata range: %v", err)
	}

	// Live: scan. A vnode whose scan meets corruption is unchecked; runs of
	// vnodes stopped by the same error are reported together.
	for _, def := range s.Tables() {
		if st.Live.ContainsEstimates(def.ID) {
			rep.Notes = append(rep.Notes, fmt.Sprintf("table %d: live statistics may contain estimates (unchecked writers)", def.ID))
		}
		var run struct {
			first, last int
			msg         string
		}
		flush := func() {
			if run.msg == "" {
				return
			}
			vnodes := fmt.Sprintf("vnode %d", run.first)
			if run.last > run.first {
				vnodes = fmt.Sprintf("vnodes %d-%d", run.first, run.last)
			}
			unchecked("live statistics of table %d %s: %s", def.ID, vnodes, run.msg)
			run.msg = ""
		}
		for v := 0; v < def.VnodeCount; v++ {
			n, err := s.verifyVnode(snap.epoch, statsinternal.LiveOf(st.Live), def.ID, uint16(v), differ)
			rep.Rows += n
			if err == nil {
				flush()
				continue
			}
			if !lsmstats.IsCorruption(err) {
				return rep, err
			}
			// The same corruption stops each vnode's scan with its own
			// prefix: group by what follows it.
			msg := err.Error()
			if _, cause, ok := strings.Cut(msg, fmt.Sprintf("vnode %d of table %d: ", v, def.ID)); ok {
				msg = cause
			}
			if run.msg != msg {
				flush()
				run.first, run.msg = v, msg
			}
			run.last = v
		}
		flush()
	}
	return rep, nil
}

// CorruptMetadata returns the metadata rows that a read-only Open left out
// because they do not decode (each error names its key), and a damaged
// checkpoint mark: what Verify reports in Corrupt before it checks
// anything. Always empty on a writable store, whose Open fails instead.
func (s *Store) CorruptMetadata() []error { return slices.Clone(s.corruptMeta) }

type fileCorruption struct {
	fileNum uint64
	err     error
}

// checkFiles validates the checksum of every block of every live SST and
// returns the corrupt ones. An SST that cannot be opened because its
// footer, metaindex or properties block is corrupt, or that is missing, is
// corrupt too; other I/O errors fail the check.
func (s *Store) checkFiles() (_ []fileCorruption, files int, _ error) {
	seen := map[uint64]bool{}
	var out []fileCorruption
	ropts := s.popts.MakeReaderOptions()
	// Compactions replace files while the check runs: a listed file that
	// vanished before it was opened is checked through its replacements,
	// which the next listing finds. A file that vanished and is still
	// listed is missing: corrupt.
	for attempt := 0; ; attempt++ {
		levels, err := s.db.SSTables()
		if err != nil {
			return nil, 0, errors.Wrap(err, "lsmstats: list SSTs")
		}
		vanished := 0
		for _, tables := range levels {
			for _, t := range tables {
				num := uint64(t.BackingSSTNum)
				if seen[num] {
					continue
				}
				ropts.CacheOpts.FileNum = t.BackingSSTNum // named in the errors
				err := s.checkFile(num, ropts)
				switch {
				case err == nil:
				case errors.Is(err, errVanished):
					vanished++
					if attempt < maxListAttempts {
						continue // not seen: the next listing decides
					}
					out = append(out, fileCorruption{num, lsmstats.MarkCorruption(errors.Wrap(err, "live SST missing"))})
				case lsmstats.IsCorruption(err):
					out = append(out, fileCorruption{num, err})
				default:
					return nil, 0, err
				}
				seen[num] = true
			}
		}
		if vanished == 0 {
			break
		}
	}
	slices.SortFunc(out, func(a, b fileCorruption) int { return cmp.Compare(a.fileNum, b.fileNum) })
	return out, len(seen), nil
}

// maxListAttempts bounds the listings of checkFiles.
const maxListAttempts = 8

// errVanished is an SST that did not exist when checkFile opened it.
var errVanished = errors.New("lsmstats: SST vanished")

func (s *Store) checkFile(num uint64, ropts sstable.ReaderOptions) error {
	readable, err := s.openSST(num)
	if err != nil {
		return err
	}
	err = s.checkReadable(readable, ropts)
	if oserror.IsNotExist(err) {
		// An object deleted after its open: a compaction replaced the SST
		// (see openSST).
		err = errors.Mark(err, errVanished)
	}
	return err
}

// checkReadable is checkFile's check of an opened SST.
func (s *Store) checkReadable(readable objstorage.Readable, ropts sstable.ReaderOptions) error {
	r, err := sstable.NewReader(context.Background(), readable, ropts)
	if err != nil {
		_ = readable.Close()
		if pebble.IsCorruptionError(err) {
			err = errors.Wrap(err, "cannot be opened (its footer, metaindex or properties block)")
		}
		return markPebble(err)
	}
	defer func() { _ = r.Close() }()
	if err := r.ValidateBlockChecksums(); err != nil {
		if kind := blockKind(r, err); kind != "" {
			err = errors.Wrap(err, kind)
		}
		return markPebble(err)
	}
	return checkValueBlocks(readable, r)
}

// openSST opens backing SST num for reading outside Pebble: its file in
// Pebble's directory or, on a store on an object store, its object (read
// in windows of verifyWindow bytes, one GET each). An open file stays
// readable if a compaction deletes it meanwhile; an object does not: a
// read of an object deleted since its open fails marked os.ErrNotExist
// (missingReadable), which checkFile marks errVanished too, and the next
// listing finds its replacements. A missing SST is marked errVanished.
func (s *Store) openSST(num uint64) (objstorage.Readable, error) {
	path := s.fs.PathJoin(s.dir, pebbleDir, fmt.Sprintf("%06d.sst", num))
	f, err := s.fs.Open(path)
	if err != nil {
		if oserror.IsNotExist(err) && s.obj != nil {
			r, err := s.obj.openSST(context.Background(), num, verifyWindow)
			if oserror.IsNotExist(err) {
				return nil, errors.Mark(err, errVanished)
			}
			return r, err
		}
		if oserror.IsNotExist(err) {
			return nil, errors.Mark(err, errVanished)
		}
		return nil, errors.Wrapf(err, "lsmstats: open %s", path)
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return nil, errors.Wrapf(err, "lsmstats: open %s", path)
	}
	return readable, nil
}

// checkValueBlocks validates the checksums of the value blocks and the value
// index block of an SST (Pebble keeps the values of older versions of a
// key there), which Pebble's ValidateBlockChecksums leaves out.
func checkValueBlocks(f objstorage.Readable, r *sstable.Reader) error {
	l, err := r.Layout()
	if err != nil {
		return markPebble(err)
	}
	check := func(what string, h block.Handle) error {
		buf := make([]byte, h.Length+block.TrailerLen)
		if int64(h.Offset)+int64(len(buf)) > f.Size() {
			return lsmstats.Corruptionf("%s (block %d/%d) is past the end of the file", what, h.Offset, h.Length)
		}
		if err := f.ReadAt(context.Background(), buf, int64(h.Offset)); err != nil {
			return errors.Wrapf(err, "lsmstats: read %s", what)
		}
		if err := block.ValidateChecksum(r.BlockReader().ChecksumType(), buf, h); err != nil {
			return markPebble(errors.Wrap(err, what))
		}
		return nil
	}
	for i, h := range l.ValueBlock {
		if err := check(fmt.Sprintf("value block %d of %d", i, len(l.ValueBlock)), h); err != nil {
			return err
		}
	}
	if l.ValueIndex.Length > 0 {
		return check("value index block", l.ValueIndex)
	}
	return nil
}

// blockKind names the block that err (Pebble's "block OFFSET/LENGTH: ...")
// is about, from the SST's layout: "data block 3 of 12"; "" if unknown.
func blockKind(r *sstable.Reader, err error) string {
	l, lerr := r.Layout()
	if lerr != nil {
		return ""
	}
	msg := err.Error()
	is := func(h block.Handle) bool {
		return h.Length > 0 && strings.Contains(msg, fmt.Sprintf("block %d/%d:", h.Offset, h.Length))
	}
	for i, h := range l.Data {
		if is(h.Handle) {
			return fmt.Sprintf("data block %d of %d", i, len(l.Data))
		}
	}
	for i, h := range l.Index {
		if is(h) {
			return fmt.Sprintf("index block %d of %d", i, len(l.Index))
		}
	}
	for _, f := range l.Filter {
		if is(f.Handle) {
			return "filter block"
		}
	}
	named := []struct {
		name string
		h    block.Handle
	}{{"top-level index block", l.TopIndex}, {"range deletion block", l.RangeDel}, {"range key block", l.RangeKey},
		{"value index block", l.ValueIndex}, {"properties block", l.Properties}, {"metaindex block", l.MetaIndex}}
	for _, n := range named {
		if is(n.h) {
			return n.name
		}
	}
	for i, h := range l.ValueBlock {
		if is(h) {
			return fmt.Sprintf("value block %d of %d", i, len(l.ValueBlock))
		}
	}
	return ""
}

// verifyMeta reports every key in the metadata range that is not a
// metadata key (Open ignores them), and checks the live statistics' rows
// (bucket rows, estimates markers, the delta log) against the live
// statistics they persist: each row that does not decode or apply goes to
// corrupt, each vnode whose rows hold other statistics to differ. A
// read-only store's live statistics are its rows as Open read them (the
// rows it left out are among its corrupt metadata already): only the key
// shapes are checked. Callers hold ingestMu, so that no commit writes
// rows meanwhile.
func (s *Store) verifyMeta(differ func(string, ...any), corrupt func(error)) error {
	var check *livebuckets.RowCheck
	if !s.opts.ReadOnly {
		s.mu.Lock()
		check = s.mu.live.RowCheck()
		s.mu.Unlock()
	}
	lo, hi := keys.TableSpan(keys.MetaTable)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return markPebble(err)
	}
	var live [][2][]byte
	for ok := it.First(); ok; ok = it.Next() {
		name, isMeta := keys.MetaName(it.Key())
		if !isMeta {
			differ("metadata range: key %x has none of the key shapes", it.Key())
			continue
		}
		if check == nil || !isLiveName(string(name)) {
			continue
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return markPebble(errors.CombineErrors(err, it.Close()))
		}
		live = append(live, [2][]byte{slices.Clone(it.Key()), slices.Clone(val)})
	}
	if err := markPebble(errors.CombineErrors(it.Error(), it.Close())); err != nil {
		return err
	}
	if check != nil {
		bad, diffs := check.Check(live)
		for _, err := range bad {
			corrupt(lsmstats.MarkCorruption(err))
		}
		for _, d := range diffs {
			differ("%s", d)
		}
	}
	return nil
}

// isLiveName reports whether a metadata name is one of the live
// statistics' rows.
func isLiveName(n string) bool {
	return strings.HasPrefix(n, keys.LivePrefix) || strings.HasPrefix(n, keys.LiveEstimatesPrefix) || strings.HasPrefix(n, keys.LiveLogPrefix)
}

func sameFiles(a, b *ssttracker.Version) bool {
	fa, fb := ssttracker.Files(a), ssttracker.Files(b)
	return slices.EqualFunc(fa, fb, func(x, y ssttracker.FileInfo) bool { return x.FileNum == y.FileNum })
}

// verifyVnode scans one vnode and compares it with its live statistics,
// bucket by bucket: counts, whether each bucket's lower bound is a live
// row, and the anchors of the first and last bucket.
func (s *Store) verifyVnode(epoch uint64, live *livebuckets.Snapshot, table uint32, vnode uint16, differ func(string, ...any)) (int64, error) {
	want := livebuckets.Detail(live, table, vnode)
	bounds := make([][]byte, len(want.Buckets))
	for i, b := range want.Buckets {
		bounds[i] = b.Lower
	}
	rc, err := s.recountVnode(table, vnode, bounds, epoch)
	var sum livebuckets.Counts
	for _, c := range rc.Buckets {
		sum = sum.Add(c.Counts)
	}
	if err != nil {
		if errors.Is(err, keys.ErrMalformedKey) {
			differ("table %d vnode %d: %v", table, vnode, err)
			return sum.Rows, nil
		}
		return sum.Rows, err
	}
	if total := live.Vnode(table, vnode); total != sum {
		differ("table %d vnode %d: live statistics say %d rows / %d bytes, a scan finds %d / %d",
			table, vnode, total.Rows, total.Bytes, sum.Rows, sum.Bytes)
		return sum.Rows, nil
	}
	for i, got := range rc.Buckets {
		w := want.Buckets[i]
		if got.Counts != w.Counts {
			differ("table %d vnode %d bucket %d (pk >= %x): live statistics say %d rows / %d bytes, a scan finds %d / %d",
				table, vnode, i, w.Lower, w.Rows, w.Bytes, got.Rows, got.Bytes)
		}
		if i > 0 && got.LowerLive != w.LowerLive {
			differ("table %d vnode %d bucket %d: live statistics say its lower bound %x is live: %t, a scan finds %t",
				table, vnode, i, w.Lower, w.LowerLive, got.LowerLive)
		}
	}
	anchor := func(name string, hint, scanned []byte, live bool, outside int) {
		switch {
		case scanned == nil:
		case hint == nil:
			differ("table %d vnode %d has rows but no %s pk", table, vnode, name)
		case live && !bytes.Equal(hint, scanned):
			differ("table %d vnode %d: %s pk %x is said to be live, a scan finds %x", table, vnode, name, hint, scanned)
		case bytes.Compare(scanned, hint) == outside:
			differ("table %d vnode %d: live row %x is beyond the %s pk %x", table, vnode, scanned, name, hint)
		}
	}
	anchor("smallest", want.MinPK, rc.MinPK, want.MinLive, -1)
	anchor("largest", want.MaxPK, rc.MaxPK, want.MaxLive, 1)
	return sum.Rows, nil
}

// RecomputeLiveStats replaces the live statistics of a table by counts
// scanned at the committed epoch, bucket by bucket, persists them, and
// clears the table's ContainsEstimates flag: what a table written by
// unchecked writers needs once its counts must be exact again, as
// CockroachDB's RecomputeStats does for a range. Commits wait while the
// table is scanned. It returns the table's live counts before and after. A
// crash leaves either the earlier counts, flag included, or the recomputed
// ones: they are persisted in one ingestion. Unchecked ops committed later
// flag the table again.
func (s *Store) RecomputeLiveStats(table uint32) (before, after stats.LiveCounts, err error) {
	if err := s.checkWritable(); err != nil {
		return before, after, err
	}
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	if err := s.checkWritable(); err != nil {
		return before, after, err
	}
	if _, err := s.table(table); err != nil {
		return before, after, err
	}
	epoch := s.committed.Load()
	s.mu.Lock()
	live := s.mu.live
	before = stats.LiveCounts(live.Current().Table(table))
	s.mu.Unlock()
	batch, err := live.Recount(table, func(vnode uint16, bounds [][]byte) (livebuckets.VnodeRecount, error) {
		return s.recountVnode(table, vnode, bounds, epoch)
	})
	if err != nil {
		return before, after, errors.Wrapf(err, "lsmstats: recompute live statistics of table %d", table)
	}
	batch.Normalize()
	if err := s.ingestMeta(batch.MetaEntries(epoch)); err != nil {
		return before, after, errors.Wrapf(err, "lsmstats: persist recomputed live statistics of table %d", table)
	}
	s.statsMu.Lock()
	s.mu.Lock()
	batch.Publish()
	after = stats.LiveCounts(s.mu.live.Current().Table(table))
	s.mu.Unlock()
	s.statsMu.Unlock()
	s.rescanBuckets(batch.Rescans())
	return before, after, nil
}

// recountVnode scans a vnode at epoch and recounts it against the given
// bucket bounds (livebuckets.VnodeScan): Verify compares the result with the
// live statistics, RecomputeLiveStats keeps it.
func (s *Store) recountVnode(table uint32, vnode uint16, bounds [][]byte, epoch uint64) (livebuckets.VnodeRecount, error) {
	it, err := s.newIter(table, vnode, nil, nil, epoch)
	if err != nil {
		return livebuckets.VnodeRecount{}, err
	}
	sc := livebuckets.NewVnodeScan(bounds)
	for ok := it.First(); ok; ok = it.Next() {
		sc.Add(it.PK(), int64(len(it.PK())+len(it.Row())))
	}
	// The iterator's errors name the table and vnode.
	err = it.Close()
	return sc.Recount(), err
}
