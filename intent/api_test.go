package intent_test

import (
	"context"
	"errors"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/lock"
)

// The fixed API of ../shared/DESIGN.md ("Wave 5"), as the acceptance
// checks compile against it.
var (
	_ func(intent.Store) *intent.Journal                                                                   = intent.New
	_ func() *intent.Memory                                                                                = intent.NewMemory
	_ intent.Store                                                                                         = intent.NewMemory()
	_ func(*intent.Journal, context.Context, lock.Held, string, func(context.Context, string) error) error = (*intent.Journal).Do
	_ func(*intent.Journal, context.Context, lock.Held) ([]intent.Intent, error)                           = (*intent.Journal).Pending
	_                                                                                                      = intent.Intent{Op: "", Key: "", Token: fence.Token{}}
	_ error                                                                                                = intent.ErrSuperseded
	_                                                                                                      = errors.Is(intent.ErrSuperseded, fence.ErrStaleToken)
)
