package grant

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/internal/names"
	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/internal/queue"
)

// Options are the options every etcd primitive has: a package's options
// struct embeds them, and its WithPrefix and WithTelemetry set them.
type Options struct {
	Prefix string     // the etcd key prefix of the primitive's queues
	Tel    obs.Config // where its telemetry goes
}

// Source is session.Source, with the session type a parameter, so that
// this package does not import package session.
type Source[S queue.Session] interface {
	Current(context.Context) (S, error)
	Client() *clientv3.Client
}

// New is the one construction of an etcd primitive (package lock's Mutex,
// Semaphore and RWMutex, package election's Election): it checks that src
// is not nil (an error matching e.InvalidOption), then name and the
// options as Check does, and returns the primitive's grant path on src.
func New[S queue.Session](src Source[S], name string, o *Options, e *Errors, apply func() error) (Path, error) {
	if NilSource(src) {
		return Path{}, fmt.Errorf("%w: session is nil", e.InvalidOption)
	}
	if err := e.Check(name, o, apply); err != nil {
		return Path{}, err
	}
	return Path{
		Current: Sessions(src.Current), Client: src.Client(), Prefix: o.Prefix,
		Name: name, Tel: obs.New(o.Tel, "etcd"), Errs: e,
	}, nil
}

// Check checks what an etcd primitive is made of besides its source, in
// order: name must pass names.Name (an error matching e.InvalidName);
// apply, which applies the package's options to the struct that embeds o
// and checks the package's own, must succeed, and o.Prefix must pass
// names.EtcdPrefix (errors matching e.InvalidOption, naming the option).
// A nil apply means the options are applied already.
func (e *Errors) Check(name string, o *Options, apply func() error) error {
	if err := names.Name(name); err != nil {
		return fmt.Errorf("%w: %w", e.InvalidName, err)
	}
	if apply != nil {
		if err := apply(); err != nil {
			return fmt.Errorf("%w: %w", e.InvalidOption, err)
		}
	}
	if err := names.EtcdPrefix(o.Prefix); err != nil {
		return fmt.Errorf("%w: %w", e.InvalidOption, err)
	}
	return nil
}

// Queue returns the primitive's queue whose entries rule grants.
func (p *Path) Queue(rule queue.Rule) *queue.Queue {
	return queue.New(p.Client, p.Prefix, p.Name, rule)
}
