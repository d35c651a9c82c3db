// Package containers builds the container images of dlock's container-mode
// tests locally, for a machine with a Docker engine and no image registry,
// and tags them with the official names, so that a machine with a registry
// would simply pull the real images:
//
//   - gcr.io/etcd-development/etcd:v3.7.3: FROM scratch with a static etcd
//     built from go.etcd.io/etcd/server/v3/etcdmain (cmd in ./etcd).
//   - redis:7.0.15: FROM scratch with the host's /usr/bin/redis-server and
//     every shared library ldd lists for it (dynamic loader included), at
//     the paths ldd prints, and an empty /tmp as its working directory.
//
// [BuildEtcd] and [BuildRedis] are idempotent: an image already present is
// reused (remove it to rebuild).
//
// # Caveats
//
//   - BuildRedis packages the host's redis-server, and returns an error if
//     its version is not the tag's (7.0.15, the version Debian 12 ships).
//     It needs ldd and a dynamically linked binary, so it is Linux-only.
//   - The Redis image has no shell and no other tools: no exec-based wait
//     strategies, no redis-cli inside.
package containers
