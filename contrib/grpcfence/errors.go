package grpcfence

import (
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlock-go/dlock/fence"
)

// ErrMissingToken is returned by FromIncomingContext when the call carries
// no MetadataKey metadata. The server interceptors answer it with
// InvalidArgument.
var ErrMissingToken = errors.New("grpcfence: missing " + MetadataKey + " metadata")

// ErrInvalidKey is returned by the client interceptors, which then do not
// send the call, when the context's idempotency key has a byte outside
// printable ASCII: gRPC metadata cannot carry it. intent.Key never makes
// such a key.
var ErrInvalidKey = errors.New("grpcfence: invalid idempotency key")

// ErrorDomain and ReasonStaleToken identify the ErrorInfo detail of a
// stale-token status.
const (
	ErrorDomain      = "dlock.fence"
	ReasonStaleToken = "STALE_FENCING_TOKEN"
)

// staleStatus builds the FailedPrecondition status for a stale token.
func staleStatus(e *fence.StaleTokenError) *status.Status {
	st := status.New(codes.FailedPrecondition, e.Error())
	if d, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason: ReasonStaleToken,
		Domain: ErrorDomain,
		Metadata: map[string]string{
			"name":    e.Name,
			"seq":     strconv.FormatUint(e.Seq, 10),
			"highest": strconv.FormatUint(e.Highest, 10),
		},
	}); err == nil {
		st = d
	}
	return st
}

// StaleError is what the client interceptors return for a stale-token
// status: it keeps the status (status.Code and status.FromError see it) and
// unwraps to the *fence.StaleTokenError, so errors.Is(err,
// fence.ErrStaleToken) holds.
type StaleError struct {
	Status *status.Status         // the FailedPrecondition status the server sent
	Stale  *fence.StaleTokenError // the numbers from its ErrorInfo detail
}

// Error returns the status's error text.
func (e *StaleError) Error() string { return e.Status.Err().Error() }

// GRPCStatus returns the status the server sent.
func (e *StaleError) GRPCStatus() *status.Status { return e.Status }

// Unwrap returns the *fence.StaleTokenError.
func (e *StaleError) Unwrap() error { return e.Stale }

// fromStatus turns a stale-token status into a *StaleError, and returns any
// other error as is.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return err
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != ErrorDomain || info.GetReason() != ReasonStaleToken {
			continue
		}
		m := info.GetMetadata()
		seq, err1 := strconv.ParseUint(m["seq"], 10, 64)
		highest, err2 := strconv.ParseUint(m["highest"], 10, 64)
		if err1 != nil || err2 != nil {
			return err
		}
		return &StaleError{Status: st, Stale: &fence.StaleTokenError{Name: m["name"], Seq: seq, Highest: highest}}
	}
	return err
}
