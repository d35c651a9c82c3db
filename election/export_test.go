package election

// WithReadHook is the test-only hook on Observe's reads: f is called with
// the revision of each read of the election's keys, before the watch from
// the next revision starts.
var WithReadHook = withReadHook
