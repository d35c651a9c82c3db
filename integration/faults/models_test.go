package faults_test

import (
	"os"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/faults"
)

type rin = faults.RegisterInput
type rout = faults.RegisterOutput
type mop = faults.MutexInput

func op(client int, call int64, in, out any, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Input: in, Output: out, Return: ret}
}

// The checker can fail: a history in which a stale write was admitted (the
// paused holder's write with token 5 after token 7 was admitted) is Illegal,
// and the visualization is written and named.
func TestRegisterModelCatchesStaleWrite(t *testing.T) {
	t.Setenv("DLOCK_ARTIFACTS", t.TempDir()) // expected failures: keep /tmp clean
	good := []porcupine.Operation{
		op(0, 0, rin{Token: 5, Value: "a"}, rout{Admitted: true}, 10),
		op(1, 20, rin{Token: 7, Value: "b"}, rout{Admitted: true}, 30),
		op(0, 40, rin{Token: 5, Value: "stale"}, rout{Admitted: false}, 50),
		op(2, 60, rin{Read: true}, rout{Value: "b"}, 70),
	}
	res, path := faults.Check(t, faults.FencedRegister, good)
	assert.Equal(t, porcupine.Ok, res)
	assert.Empty(t, path)

	bad := []porcupine.Operation{
		op(0, 0, rin{Token: 5, Value: "a"}, rout{Admitted: true}, 10),
		op(1, 20, rin{Token: 7, Value: "b"}, rout{Admitted: true}, 30),
		op(0, 40, rin{Token: 5, Value: "stale"}, rout{Admitted: true}, 50),
		op(2, 60, rin{Read: true}, rout{Value: "stale"}, 70),
	}
	res, path = faults.Check(t, faults.FencedRegister, bad)
	assert.Equal(t, porcupine.Illegal, res, "an admitted stale write must be reported")
	require.NotEmpty(t, path)
	st, err := os.Stat(path)
	require.NoError(t, err, "the visualization is written")
	assert.Positive(t, st.Size())

	// Overlapping calls may linearize either way: both orders are legal.
	concurrent := []porcupine.Operation{
		op(0, 0, rin{Token: 5, Value: "a"}, rout{Admitted: false}, 30),
		op(1, 10, rin{Token: 7, Value: "b"}, rout{Admitted: true}, 20),
	}
	res, _ = faults.Check(t, faults.FencedRegister, concurrent)
	assert.Equal(t, porcupine.Ok, res)
}

func TestMutexModel(t *testing.T) {
	t.Setenv("DLOCK_ARTIFACTS", t.TempDir())
	good := []porcupine.Operation{
		op(0, 0, mop{Token: 3}, nil, 10),
		op(1, 5, mop{Token: 8}, nil, 40), // waits for 3's release
		op(0, 20, mop{Release: true, Token: 3}, nil, 30),
		op(1, 50, mop{Release: true, Token: 8}, nil, 60),
	}
	res, _ := faults.Check(t, faults.FencedMutex, good)
	assert.Equal(t, porcupine.Ok, res)

	overlap := []porcupine.Operation{
		op(0, 0, mop{Token: 3}, nil, 10),
		op(1, 20, mop{Token: 8}, nil, 30), // granted while 3 still holds
		op(0, 40, mop{Release: true, Token: 3}, nil, 50),
		op(1, 60, mop{Release: true, Token: 8}, nil, 70),
	}
	res, path := faults.Check(t, faults.FencedMutex, overlap)
	assert.Equal(t, porcupine.Illegal, res, "two holders at once must be reported")
	assert.FileExists(t, path)

	backwards := []porcupine.Operation{
		op(0, 0, mop{Token: 8}, nil, 10),
		op(0, 20, mop{Release: true, Token: 8}, nil, 30),
		op(1, 40, mop{Token: 3}, nil, 50), // a token below an earlier one
	}
	res, _ = faults.Check(t, faults.FencedMutex, backwards)
	assert.Equal(t, porcupine.Illegal, res, "a token that goes backwards must be reported")
}
