// Package fault is the cluster harness's nemesis: the fault classes, one
// family per file (fault_*.go), each a type behind the small faultClass
// interface (Name, Available, Duration, Inject), listed once in
// etcdFaults, guardFaults or redisFaults.
//
// A run's schedule is drawn from one seeded PRNG: for each fault a pick
// and its length, the same number of draws whatever happens, so a seed
// (DLOCK_SEED) replays the same classes with the same lengths in the same
// order. Targets are chosen by role when a fault begins (the leader, a
// holder's member, a worker in a given step).
//
// # Caveats
//
// A replay aims at whoever has the role then, not at the same process.
// A fault that finds no target in time is recorded as skipped (Note), and
// one that cannot be injected or healed as an error (Err), which fails
// the run.
package fault
