// Package containers builds the container images of dlock's container-mode
// tests locally, for a machine with a Docker engine and no image registry,
// and tags them with the official names, so that a machine with a registry
// would simply pull the real images:
//
//   - gcr.io/etcd-development/etcd:v3.7.3: FROM scratch with a static etcd
//     built from go.etcd.io/etcd/server/v3/etcdmain (cmd in ./etcd).
//
// [BuildEtcd] is idempotent: an image already present is reused (remove it
// to rebuild).
//
// # Caveats
//
//   - A Redis image (redis-server with its libraries) is not built yet.
package containers
