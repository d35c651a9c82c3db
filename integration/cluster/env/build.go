package env

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// bins are the programs a run starts.
type bins struct {
	etcd, worker, resource, payments string
}

var built struct {
	once sync.Once
	dir  string
	err  error
}

// build builds the worker (with the library's fault seam: -tags
// dlock_faults), the resource and the payment API once per test binary, into a temporary
// directory that RemoveBuilds deletes.
func build(etcd string) (bins, error) {
	if etcd == "" {
		etcd = os.Getenv("DLOCK_ETCD")
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "dlock-cluster-bin-"); built.err != nil {
			return
		}
		for _, c := range []string{"worker", "resource", "payments"} {
			cmd := exec.Command("go", "build", "-tags", "dlock_faults", "-o", filepath.Join(built.dir, c),
				"github.com/dlock-go/dlock/integration/cluster/cmd/"+c)
			if out, err := cmd.CombinedOutput(); err != nil {
				built.err = fmt.Errorf("build %s: %v\n%s", c, err, out)
				return
			}
		}
	})
	if built.err != nil {
		return bins{}, built.err
	}
	return bins{etcd: etcd, worker: filepath.Join(built.dir, "worker"), resource: filepath.Join(built.dir, "resource"),
		payments: filepath.Join(built.dir, "payments")}, nil
}

// RemoveBuilds deletes what build built (TestMain calls it).
func RemoveBuilds() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}
