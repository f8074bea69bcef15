// Package s3server runs a real S3-compatible server for tests and
// benchmarks: SeaweedFS's all-in-one `weed mini`, a child process bound to
// 127.0.0.1 only, on ports chosen free at start (never fixed ones), with a
// data directory of its own under the system's temporary directory
// (lsmstats-weed-*). weed mini also puts a gRPC socket per service in /tmp,
// whatever its flags; the helpers remove them with the server, and a later
// start removes the directories and sockets of test binaries that died
// without removing theirs.
//
// The binary is built once into a cache outside the repository by
// `make objstore` (Build; BinaryPath says where). A test that needs a server
// and finds no binary, or a server that does not come up, fails with a
// message that names `make objstore`; it never skips.
//
// Two ways to get a server:
//
//   - Start(t) starts a server of the test's own, stopped (with its data
//     directory removed) when the test ends. Fault tests use it: Stop kills
//     the process (SIGKILL) and Start starts it again on the same ports and
//     data, Pause and Resume freeze and thaw it (SIGSTOP, SIGCONT).
//   - Shared(t) returns one server per test binary, started on first use and
//     stopped when RunTests (called from TestMain) returns. Tests share it
//     through a bucket each (NewBucket); they must not stop or pause it.
//
// A server takes about 5 s to start (3 of them its filer's start; more on
// a busy machine) and holds about 120 MiB resident idle, 250 MiB after a
// thousand small objects (BenchmarkStart measures both), which is why tests
// share one where they can. Start after Stop takes longer: the restarted
// master holds writes for its warm-up (three heartbeat pulses, 10–15 s),
// and Start returns only once a write succeeds. The server is one process;
// the helpers kill its whole process group and, on Linux, the kernel kills
// it if the test binary dies first (Pdeathsig), so no server outlives its
// test run.
//
// Each bucket is a SeaweedFS collection with a volume of its own. weed mini
// would allow as many volumes as the free disk holds of its 1 GiB volume
// size, which ran out at the 31st bucket on a machine with 35 GiB free
// (HTTP 500 "no free volumes left" to every write of the next bucket, no
// matter how long a client retries); the server runs with a fixed budget
// of volumes instead (maxVolumes; a volume takes no disk until it is
// written), whatever the machine (TestManyBuckets).
//
// It is imported by tests and benchmarks, and by tools/s3run, which runs a
// command (make demo-s3) beside a server of its own (Launch, Close).
package s3server
