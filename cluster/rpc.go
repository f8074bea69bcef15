package cluster

// The protocol between the coordinator and its nodes: one gRPC service,
// lsmstats.cluster.Node, that every node serves and the coordinator calls.
// Its messages are the Go structs below, encoded as JSON by a codec of
// gRPC's own interface (jsonCodec), so that the protocol needs no
// generated code: the service is described by hand (nodeServiceDesc) as
// protoc-gen-go-grpc would describe it. Byte fields (an export) travel as
// base64, which costs a third more bytes than protobuf would on the one
// message that carries data.

import (
	"context"
	"encoding/json"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
	"google.golang.org/grpc"
)

// jsonCodec is gRPC's codec for the service's messages.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return "json" }

// maxMessage bounds a message: an export inlines the versions it copied.
const maxMessage = 1 << 30

// serviceName is the gRPC service every node serves.
const serviceName = "lsmstats.cluster.Node"

// JobSpec is the job a node runs over its vnodes: the same on every node.
type JobSpec struct {
	// Workload is the upstream table's generator; every node runs the
	// whole table's generator and keeps the ops of its own vnodes.
	Workload workload.Params `json:"workload"`
	// Mode is the kind of backfill: "arrangement" (or empty), or
	// "snapshot" (a snapshot at a pinned epoch, the changes meanwhile in a
	// log store partitioned by vnode, whose ranges move with the others).
	Mode            string `json:"mode,omitempty"`
	Actors          int    `json:"actors"`
	CheckpointEvery int    `json:"checkpoint_every"`
	ChunkSize       int    `json:"chunk_size,omitempty"`
	BarrierRows     int    `json:"barrier_rows,omitempty"`
}

// Range is a half-open vnode range [Lo, Hi).
type Range struct {
	Lo int `json:"lo"`
	Hi int `json:"hi"`
}

// OpenRequest opens (or reopens) the node's job over Vnodes.
type OpenRequest struct {
	Job    JobSpec `json:"job"`
	Vnodes []Range `json:"vnodes"`
}

// Status is where a node stands: the last step its store committed (the
// step a reopened job resumes after), the step it has run to, its
// committed epoch and its vnodes.
type Status struct {
	Node      string  `json:"node"`
	Committed uint64  `json:"committed_step"`
	Step      uint64  `json:"step"`
	Epoch     uint64  `json:"committed_epoch"`
	Vnodes    []Range `json:"vnodes"`
	Open      bool    `json:"open"`
	Finished  bool    `json:"finished"`
}

// BarrierRequest asks a node to run step Step of its job: its upstream
// ops, its actors' barrier, and the commit when the step is a
// checkpoint. Truth asks the checkpoint's truth too (a scan).
type BarrierRequest struct {
	Step  uint64 `json:"step"`
	Truth bool   `json:"truth"`
}

// Report is a node's progress at a checkpoint, as RisingWave's compute
// nodes report their actors' progress to the meta with the barrier's
// completion: the raw numbers of each estimator over the node's vnodes,
// which the coordinator sums.
type Report struct {
	Checkpoint bool   `json:"checkpoint"`
	Step       uint64 `json:"step"`
	Epoch      uint64 `json:"epoch"`
	// Started says that the backfill has begun (the load steps are over).
	Started  bool `json:"started"`
	Finished bool `json:"finished"`
	// Phase is a snapshot backfill's phase ("snapshot", "log store",
	// "joined"); empty for an arrangement backfill.
	Phase string `json:"phase,omitempty"`
	// Figures are the estimators' figures (Consumed and Total raw).
	Figures []backfill.Figure `json:"figures"`
	// StatsLower and StatsUpper bound the stats approach's consumed rows.
	StatsLower float64 `json:"stats_lower"`
	StatsUpper float64 `json:"stats_upper"`
	// TruthBehind and TruthTotal are the truth's numbers (a scan of the
	// node's vnodes at the committed epoch), when asked.
	TruthBehind int64 `json:"truth_behind"`
	TruthTotal  int64 `json:"truth_total"`
	Vnodes      int   `json:"vnodes"`
	// SnapshotRows counts the snapshot rows the node's job read since it
	// was opened.
	SnapshotRows uint64 `json:"snapshot_rows"`
	Actors       int    `json:"actors"`
	// ProgressNS is the time the node's stats estimator took at this
	// checkpoint (its figure over the node's vnodes).
	ProgressNS int64 `json:"progress_ns"`
	// BackupBytes and BackupNS are the size and time of the backup the
	// node uploaded after committing the step (0 without backups).
	BackupBytes int64 `json:"backup_bytes,omitempty"`
	BackupNS    int64 `json:"backup_ns,omitempty"`
}

// MoveRequest names a vnode range of the job's tables.
type MoveRequest struct {
	Range Range `json:"range"`
	// Compact asks the source to compact the range down to Pebble's bottom
	// level (in the object store) before its export, so that the export
	// copies no version: every one is in a shared SST then.
	Compact bool `json:"compact,omitempty"`
}

// ExportResponse carries a range's exports, one per table of the job
// (upstream, MV, state), as lsm.VnodeExport's byte form.
type ExportResponse struct {
	Exports [][]byte      `json:"exports"`
	Stats   lsm.MoveStats `json:"stats"`
}

// ImportRequest hands a node the exports of a range.
type ImportRequest struct {
	Exports [][]byte `json:"exports"`
}

// MoveResponse reports an import.
type MoveResponse struct {
	Stats lsm.MoveStats `json:"stats"`
}

// CheckResponse is a node's self-check at its committed epoch: its
// statistics against a scan, Verify, and its MV against its upstream.
type CheckResponse struct {
	Status    Status   `json:"status"`
	Problems  []string `json:"problems"`
	LiveRows  int64    `json:"live_rows"`
	MVMatches bool     `json:"mv_matches"`
}

// Empty is a message without fields.
type Empty struct{}

// NodeServer is what a node serves.
type NodeServer interface {
	Heartbeat(context.Context, *Empty) (*Status, error)
	Open(context.Context, *OpenRequest) (*Status, error)
	Barrier(context.Context, *BarrierRequest) (*Report, error)
	Export(context.Context, *MoveRequest) (*ExportResponse, error)
	Import(context.Context, *ImportRequest) (*MoveResponse, error)
	Drop(context.Context, *MoveRequest) (*Status, error)
	Check(context.Context, *Empty) (*CheckResponse, error)
	Stop(context.Context, *Empty) (*Empty, error)
}

// unary describes one method of the service: it decodes the request into
// a new Req and calls the server's method.
func unary[Req any, Resp any](name string, call func(NodeServer, context.Context, *Req) (*Resp, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			req := new(Req)
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, r any) (any, error) { return call(srv.(NodeServer), ctx, r.(*Req)) }
			if icpt == nil {
				return h(ctx, req)
			}
			return icpt(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + serviceName + "/" + name}, h)
		},
	}
}

var nodeServiceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*NodeServer)(nil),
	Methods: []grpc.MethodDesc{
		unary("Heartbeat", NodeServer.Heartbeat),
		unary("Open", NodeServer.Open),
		unary("Barrier", NodeServer.Barrier),
		unary("Export", NodeServer.Export),
		unary("Import", NodeServer.Import),
		unary("Drop", NodeServer.Drop),
		unary("Check", NodeServer.Check),
		unary("Stop", NodeServer.Stop),
	},
	Metadata: "lsmstats/cluster/rpc.go",
}

// NewServer returns a gRPC server serving srv as a node.
func NewServer(srv NodeServer) *grpc.Server {
	s := grpc.NewServer(grpc.ForceServerCodec(jsonCodec{}),
		grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage))
	s.RegisterService(&nodeServiceDesc, srv)
	return s
}

// client calls a node.
type client struct{ cc *grpc.ClientConn }

func (c client) call(ctx context.Context, timeout time.Duration, method string, req, resp any) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return c.cc.Invoke(ctx, "/"+serviceName+"/"+method, req, resp)
}

func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.ForceCodec(jsonCodec{}),
			grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
	}
}
