package lock

// DefaultOwner is the owner stored with grants when WithOwner is not given.
var DefaultOwner = defaultOwner

// QueuePrefix returns the etcd key prefix of a Mutex's queue: its LockKey
// without "etcd:".
func QueuePrefix(m *Mutex) string { return m.q.Prefix() }

// RWPrefix returns the etcd key prefix of an RWMutex's queue: a Mutex's of
// the same name.
func RWPrefix(rw *RWMutex) string { return rw.writer.Prefix() }

// SemaphorePrefix returns the etcd key prefix of a Semaphore's queue.
func SemaphorePrefix(s *Semaphore) string { return s.q.Prefix() }
