package redis

import "errors"

// For the tests of package redis_test that count acquire attempts.
var (
	AcquireScriptHash = acquireScript.Hash()
	AcquireScriptSrc  = acquireSrc
)

// QuorumCounts is what a Redlock's no-quorum error counted: nodes that
// acted, nodes where the lock was held elsewhere (or this grant gone),
// the quorum and N; ok is false if err carries no such count.
type QuorumCounts struct{ OK, Held, Quorum, Nodes, Failed int }

func QuorumOf(err error) (QuorumCounts, bool) {
	var qe *quorumError
	if !errors.As(err, &qe) {
		return QuorumCounts{}, false
	}
	return QuorumCounts{OK: qe.ok, Held: qe.held, Quorum: qe.quorum, Nodes: qe.nodes, Failed: len(qe.errs)}, true
}
