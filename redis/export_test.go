package redis

// For the tests of package redis_test that count acquire attempts.
var (
	AcquireScriptHash = acquireScript.Hash()
	AcquireScriptSrc  = acquireSrc
)
