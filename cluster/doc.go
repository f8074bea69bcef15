// Package cluster runs one backfill job over several store nodes, as
// RisingWave runs a streaming job over its compute nodes under its meta:
// each node (Node, a process of its own: lsmstats node) holds one
// lsm.Store — its WAL and MANIFEST on its local disk, its SSTs in the
// cluster's object store, one bucket and prefix shared by every node, each
// store with its own creator id — and the job's actors of the vnodes
// assigned to it; a coordinator (Coordinator, the meta role) owns the
// assignment, injects the barriers, declares the checkpoints, sums the
// job's progress and moves vnode ranges between nodes.
//
//	                   coordinator (meta)
//	  assignment: node → vnode ranges;  step;  displayed high-water marks
//	    │ Open / Barrier / Export / Import / Drop / Check   ▲ Report per step
//	    ▼ Heartbeat every 200ms (lost after HeartbeatTimeout) │ (Σ consumed, Σ total)
//	┌────────────┐      ┌────────────┐      ┌────────────┐
//	│ node-0     │      │ node-1     │      │ node-2     │
//	│ vnodes 0-84│      │ 85-169     │      │ 170-255    │
//	│ job, actors│      │ job, actors│      │ job, actors│
//	│ WAL, MANIF.│      │ WAL, MANIF.│      │ WAL, MANIF.│
//	└─────┬──────┘      └─────┬──────┘      └─────┬──────┘
//	      └─── shared SSTs (L5, L6) in one bucket/prefix ───┘
//
// # The protocol
//
// gRPC on loopback (rpc.go): one service, lsmstats.cluster.Node, that
// every node serves and the coordinator calls, its messages Go structs in
// JSON (a gRPC codec of its own; no generated code). The coordinator calls
// Barrier(step) on every node at once; a node runs that step of its job —
// the upstream's ops of its vnodes (every node runs the whole table's
// deterministic generator and keeps its own vnodes' ops), its actors'
// barrier, and, when the step is a checkpoint, its store's commit — and
// answers with its Report: each estimator's raw consumed and total over
// its vnodes (and, asked, the truth's: a scan), as RisingWave's compute
// nodes send their actors' progress with each barrier's completion. A
// step is a cluster checkpoint once every node committed it; the
// coordinator then sums the reports (Σ consumed / Σ total per approach,
// the stats bounds summed too) and keeps each displayed figure monotone
// (its high-water mark, below 100% until every node finished).
//
// Every node commits the same epochs (one per step), as stores under one
// global barrier do: a vnode move needs the destination's committed epoch
// at least the source's (lsm.Store.MoveVnodes), and in lockstep they are
// equal at every checkpoint.
//
// # Moving vnodes
//
// At a cluster checkpoint, Coordinator.Move(from, to, range): from closes
// its job and exports the range of each of the job's three tables
// (upstream, MV, backfill state: the state table is vnode-keyed, so the
// vnodes' backfill cursors move with their rows) as lsm.VnodeExport's byte
// form — the shared SSTs by reference (their backings), the versions not
// in shared SSTs copied, the live statistics bucket for bucket; to imports
// them (one IngestAndExcise per table); from releases its backings and
// drops the range; both reopen their jobs over their new vnodes. The
// per-vnode physical statistics of the range on to come from the shared
// SSTs restricted to the range (virtual SSTs, rescanned within their
// bounds: exact), the live statistics are the source's. Verify on both
// holds every statistic to the data (TestCluster checks it after every
// event), and Node.Check that a node holds rows of its own vnodes only.
//
// Each step of a move is atomic. A source that fails between the
// destination's import and its own drop holds the range too: the range is
// the destination's from the import on, and the source drops its copy when
// it is back, before its job reopens (TestClusterMoveCrash). A destination
// that fails in its import holds all of the range or none: the source,
// which still holds its export, reopens its job over the range, and the
// destination's copy, if the import went through, is in vnodes its job
// does not own, excised by the next import of that range.
//
// # Snapshot backfill
//
// JobSpec.Mode "snapshot" runs a snapshot backfill on every node: each
// node's part reads its vnodes' snapshot at the pinned epoch while their
// changes go to the log store, partitioned by vnode (backfill/doc.go), so
// that a move takes a range's pending log rows and its share of the phase
// figure with it, in any phase (TestClusterSnapshot moves a range in its
// log-store phase).
//
// # Rescaling
//
// Coordinator.Retire(node) moves a node's vnode ranges to the others at
// the next checkpoint (each range split evenly among them) and stops it;
// Coordinator.AddNode starts a node that owns no vnodes: its job part
// runs every step from the first (its source's ops all belong to others),
// so its store commits the same epochs, and moves give it vnodes at any
// checkpoint after it caught up. A rescale 3 → 2 → 3 is a Retire, then an
// AddNode and moves.
//
// # A lost node
//
// A node that misses its heartbeats for HeartbeatTimeout, or whose call
// fails, is recovered before the next step: one that answers is reopened
// from its last checkpoint; one that does not is killed and started again
// on its directory, where its store recovers its last commit (its WAL and
// MANIFEST), and its job resumes from it. The other nodes keep their steps
// run since; the recovered node catches up alone (its steps are its own
// vnodes' ops) and the cluster goes on. With ReassignLost (the CLI's
// default) the recovered node is then retired at the next checkpoint: its
// vnodes go to the live nodes, as RisingWave's meta reassigns a lost
// compute node's. A barrier whose answer was lost is asked again: a node
// answers the step it ran last with its report kept, so no step runs
// twice.
//
// Nothing committed is lost, with the node's disk or without it: a node
// given a backup name (ServeConfig.Backup; the CLI's nodes have one per
// run) backs its store up to the bucket (lsm.Store.Backup: its MANIFEST,
// catalog and WAL records, beside its SSTs) after every commit, import
// and drop, before it answers, so every checkpoint the coordinator
// declared is in the bucket. A node started on a directory without a
// store restores its backup there first (lsm.Restore), and resumes from
// its last checkpoint like a node that kept its disk (TestClusterDiskLoss;
// TestCluster's SIGKILLed node loses its directory too). The coordinator
// needs nothing of the lost disk: the restored node's store is the
// node's state.
//
// # What every node does twice
//
// Every node runs the whole table's workload generator and keeps its own
// vnodes' ops (bench/genjob.Part): the generator's model is of the whole
// table, so each node's CPU for the source grows with the table, not with
// its share. A real upstream would route each row to its vnode's owner.
package cluster
