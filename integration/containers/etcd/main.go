// Command etcd is etcd's server main, built statically from this module's
// go.etcd.io/etcd/server/v3 for the FROM-scratch container image (see
// package containers).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
