package livebuckets

import (
	"bytes"
	"slices"
	"unsafe"
)

// A checkpoint's estimates read every vnode in progress of a table, in
// vnode order, each one cold: the commit before it published fresh copies
// of the vnodes it touched, and other work evicted them from the caches.
// Allocated one by one, in the order a batch first touched them (the
// order of its ops: by hash, random), the copies of neighbouring vnodes
// would lie pages apart, and each vnode would cost a TLB miss or two on
// top of its cache misses: at 4096 vnodes that was a third of the time.
// So a publish lays out the vnodes it publishes, table by table, in vnode
// order in one allocation of structs and one of their indexes (an arena),
// and the estimates walk memory forwards.
//
// An arena lives as long as any snapshot points into it. The current
// snapshot's vnodes hold parts of several (each publish adds one, untouched
// vnodes stay where they are), and a vnode that a later publish replaces
// leaves its old copy behind: a publish that leaves an arena less than
// half held by the current snapshot moves the vnodes still in it to its
// own arena, so the arenas the current snapshot holds never take more
// than twice the memory of its vnodes.

// arena is one publish's allocation of vnodes and their indexes, in bytes:
// its size, and how much of it the current snapshot's vnodes hold.
type arena struct {
	size, held int
}

// footprint is the bytes a sealed vnode takes in an arena: its struct and
// its index.
func (v *liveVnode) footprint() int {
	return int(unsafe.Sizeof(liveVnode{})) + 8*(2*len(v.buckets)+1)
}

// release tells v's arena that the current snapshot no longer holds v.
func (v *liveVnode) release() {
	if v != nil && v.arena != nil {
		v.arena.held -= v.footprint()
	}
}

// placed is a vnode and its position in its table, and the sealed vnode
// it was copied from (nil if none), whose index its own may share: same
// of its first buckets are was's, or -1 if that is not known.
type placed struct {
	vn   uint16
	v    *liveVnode
	was  *liveVnode
	same int
}

// pack seals copies of the vnodes ps of table t, in vnode order, into a
// new arena, and points t at them.
func pack(t *liveTable, ps []placed) {
	slices.SortFunc(ps, func(a, b placed) int { return int(a.vn) - int(b.vn) })
	words := 0
	for _, p := range ps {
		words += 2*len(p.v.buckets) + 1
	}
	index := make([]uint64, words)
	structs := make([]liveVnode, len(ps))
	a := &arena{}
	for j, p := range ps {
		n := 2*len(p.v.buckets) + 1
		v := &structs[j]
		*v = *p.v
		v.sealInto(index[:n:n], p.was, p.same)
		index = index[n:]
		v.arena = a
		a.size += v.footprint()
		t.vnodes[p.vn] = v
	}
	a.held = a.size
	packPrefixes(structs)
}

// packPrefixes copies the query prefixes of vnodes (see keyView.prefix),
// sealed in vnode order, into one allocation, where a vnode whose prefix
// equals the previous one's shares it: the pks of a table often start
// with the same tenant or path in every vnode, and the estimates then
// compare every cursor with one prefix, kept warm.
func packPrefixes(vnodes []liveVnode) {
	var size int
	var last []byte
	for i := range vnodes {
		if p := vnodes[i].q.prefix; len(p) > 0 && !bytes.Equal(p, last) {
			size += len(p)
			last = p
		}
	}
	if size == 0 {
		return
	}
	slab := make([]byte, 0, size)
	last = nil
	for i := range vnodes {
		q := &vnodes[i].q
		if len(q.prefix) == 0 {
			continue
		}
		if !bytes.Equal(q.prefix, last) {
			n := len(slab)
			slab = append(slab, q.prefix...)
			last = slab[n:len(slab):len(slab)]
		}
		q.prefix = last
	}
}

// publishTable packs ps, the vnodes a batch changed in table t (was is
// the table as the current snapshot has it), with the vnodes of any arena
// that their replacement leaves less than half held.
func publishTable(t, was *liveTable, ps []placed) {
	var sparse []*arena
	for i, p := range ps {
		old := was.vnodeOrNil(p.vn)
		ps[i].was, ps[i].same = old, -1
		if old != nil && p.v.sharedWith == old {
			ps[i].same = p.v.shared
		}
		old.release()
		if a := old.arenaOrNil(); a != nil && 2*a.held < a.size && !slices.Contains(sparse, a) {
			sparse = append(sparse, a)
		}
	}
	if len(sparse) > 0 {
		// The vnodes still in a sparse arena move too (the batch's own
		// are new copies, in no arena).
		for vn, v := range t.vnodes {
			if a := v.arenaOrNil(); a != nil && slices.Contains(sparse, a) {
				v.release()
				ps = append(ps, placed{vn: uint16(vn), v: v, was: v, same: len(v.buckets)})
			}
		}
	}
	pack(t, ps)
}

func (t *liveTable) vnodeOrNil(v uint16) *liveVnode {
	if t == nil || int(v) >= len(t.vnodes) {
		return nil
	}
	return t.vnodes[v]
}

func (v *liveVnode) arenaOrNil() *arena {
	if v == nil {
		return nil
	}
	return v.arena
}
