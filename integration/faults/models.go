package faults

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// RegisterInput is an operation on a fenced register: a write of Value with
// Token, or a read (Read true, Token and Value ignored).
type RegisterInput struct {
	Read  bool
	Token uint64
	Value string
}

// RegisterOutput is the register's answer: for a write, whether the guard
// admitted it; for a read, the value read.
type RegisterOutput struct {
	Admitted bool
	Value    string
}

type registerState struct {
	highest uint64
	value   string
}

// FencedRegister is the porcupine model of a register behind a fencing
// guard: a write is admitted iff its token is at least the highest token
// admitted so far (and then sets the value); a rejected write changes
// nothing; a read returns the last admitted value.
var FencedRegister = porcupine.Model{
	Init: func() any { return registerState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(registerState), input.(RegisterInput), output.(RegisterOutput)
		if in.Read {
			return out.Value == s.value, s
		}
		if in.Token >= s.highest {
			return out.Admitted, registerState{highest: in.Token, value: in.Value}
		}
		return !out.Admitted, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(RegisterInput), output.(RegisterOutput)
		if in.Read {
			return fmt.Sprintf("read() -> %q", out.Value)
		}
		verdict := "admitted"
		if !out.Admitted {
			verdict = "rejected"
		}
		return fmt.Sprintf("write(%q, token %d) -> %s", in.Value, in.Token, verdict)
	},
	DescribeState: func(state any) string {
		s := state.(registerState)
		return fmt.Sprintf("highest %d, value %q", s.highest, s.value)
	},
}

// MutexInput is an operation on a fenced mutex: an acquire that was granted
// Token, or the release of the grant with Token. Every recorded operation
// succeeded; its output is ignored (use nil).
type MutexInput struct {
	Release bool
	Token   uint64
}

type mutexState struct {
	holder uint64 // 0: free
	last   uint64 // the highest token granted so far
}

// FencedMutex is the porcupine model of a mutex with fencing tokens: an
// acquire succeeds only while nobody holds the mutex and with a token
// strictly above every earlier one; a release is by the current holder.
// Record a grant lost without Unlock (its session expired) as a release whose
// call time is the grant's return: it happened at some point since.
var FencedMutex = porcupine.Model{
	Init: func() any { return mutexState{} },
	Step: func(state, input, _ any) (bool, any) {
		s, in := state.(mutexState), input.(MutexInput)
		if in.Release {
			return s.holder == in.Token, mutexState{last: s.last}
		}
		return s.holder == 0 && in.Token > s.last, mutexState{holder: in.Token, last: in.Token}
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(MutexInput)
		if in.Release {
			return fmt.Sprintf("release(%d)", in.Token)
		}
		return fmt.Sprintf("acquire() -> %d", in.Token)
	},
	DescribeState: func(state any) string {
		s := state.(mutexState)
		if s.holder == 0 {
			return fmt.Sprintf("free (last %d)", s.last)
		}
		return fmt.Sprintf("held by %d", s.holder)
	},
}
