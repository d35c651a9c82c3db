package capacity

// The driver and its workers talk in JSON lines: the driver writes
// commands to a worker's stdin, the worker answers each one (by id, in
// any order: commands run concurrently) on its stdout. A worker exits,
// closing its sessions, when its stdin ends.

// WorkerEnv is the environment variable that makes the dlock binary (or
// a test binary, from TestMain) run as a capacity worker: see IsWorker.
const WorkerEnv = "DLOCK_CAPACITY_WORKER"

// Worker operations.
const (
	opOpen       = "open"       // start Sessions sessions of Impl on Clients clients
	opHold       = "hold"       // each session takes K locks and holds them
	opLoop       = "loop"       // Slots loops of Lock→Unlock for DurMillis
	opLockUnlock = "lockunlock" // K sequential Lock+Unlock on session 0
	opHoldOne    = "holdone"    // session 0 takes Name and holds it
	opRelease    = "release"    // unlock what holdone took
	opWait       = "wait"       // K waiters on Name: Lock, record, Unlock
	opWaitMany   = "waitmany"   // session s waits for Prefix/<Base+s>/0
	opQueued     = "queued"     // how many limit waiters are waiting
	opMark       = "mark"       // note each session's last renewal
	opRenewed    = "renewed"    // wait until each session renewed since mark
	opProbe      = "probe"      // session 0 takes Name once: the first grant
	opLost       = "lost"       // how many sessions have ended
)

// command is one request to a worker.
type command struct {
	ID        int    `json:"id"`
	Op        string `json:"op"`
	Impl      string `json:"impl,omitempty"`
	DSN       string `json:"dsn,omitempty"`
	Root      string `json:"root,omitempty"`
	Sessions  int    `json:"sessions,omitempty"`
	Clients   int    `json:"clients,omitempty"`
	TTLMillis int64  `json:"ttl_ms,omitempty"`
	Prefix    string `json:"prefix,omitempty"`
	Name      string `json:"name,omitempty"`
	Base      int    `json:"base,omitempty"`
	K         int    `json:"k,omitempty"`
	Skip      int    `json:"skip,omitempty"`
	Watch     bool   `json:"watch,omitempty"`
	Slots     int    `json:"slots,omitempty"`
	DurMillis int64  `json:"dur_ms,omitempty"`
}

// reply answers the command of the same id.
type reply struct {
	ID      int       `json:"id"`
	Err     string    `json:"err,omitempty"`
	Lat     []float64 `json:"lat,omitempty"` // milliseconds
	Count   int       `json:"count,omitempty"`
	Events  []event   `json:"events,omitempty"`
	GrantNS int64     `json:"grant_ns,omitempty"`
	LastNS  int64     `json:"last_ns,omitempty"`
	Lost    int       `json:"lost,omitempty"`
}

// event is one grant: when it was granted and released (Unix ns, wall
// clock: the driver and its workers share a host) and its key's create
// revision.
type event struct {
	Grant  int64 `json:"g"`
	Unlock int64 `json:"u,omitempty"`
	Rev    int64 `json:"r,omitempty"`
}
