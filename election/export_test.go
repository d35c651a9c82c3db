package election

// WithReadHook is the test-only hook on Observe's reads: f is called with
// the revision of each read of the election's keys, before the watch from
// the next revision starts.
var WithReadHook = withReadHook

// TermKey returns the leader's etcd key, for tests that delete it by hand.
func TermKey(t *Term) string { return t.h.Key() }

// Validate is Run's check of a Config.
func (c *Config) Validate() error {
	_, err := c.validate()
	return err
}

// PrefixOf returns the etcd key prefix of the election's candidates.
func PrefixOf(el *Election) string { return el.q.Prefix() }
