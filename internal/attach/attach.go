// Package attach keeps the state that lives and dies with one session of
// package session: the lease-bound bookkeeping of the etcd locks and
// elections built on it (internal/queue's key names, epochs and held
// keys). The session runs each attachment's Heartbeat after each
// acknowledged keepalive and its End when it ends, before its Done closes.
//
// None of it is part of the session's API. Package session's Session
// embeds a Set under an unexported name; Set's one method is unexported,
// so the embedding promotes nothing a user can call, and gives
// *session.Session the method that Owner asks for: the packages of this
// module reach a session's attachments with To, and no one else can.
package attach

import (
	"context"
	"sync"
)

// Attachment is state attached to a session. The session calls Heartbeat
// after each acknowledged keepalive, in its heartbeat goroutine under a
// context bounded well within the heartbeat interval (so it must be
// quick), and End once, with the session's Err, when the session ends,
// before its Done closes (so that the grants it ends report their loss no
// later than the session itself).
type Attachment interface {
	Heartbeat(ctx context.Context)
	End(err error)
}

// Set is one session's attachments. The zero value is an empty set. A Set
// must not be copied after first use.
type Set struct {
	mu    sync.Mutex
	byKey map[any]Attachment
	order []Attachment // in order of attachment; nil once ended
	err   error        // the session's end, once End ran
}

// Owner is a value that embeds a Set: package session's *Session.
type Owner interface{ attachments() *Set }

func (s *Set) attachments() *Set { return s }

// To returns the attachment of o stored under key, storing mk's first. On
// a set that has ended, mk's attachment is ended at once (End with the
// session's cause) and not stored. Keys are compared as map keys are; use
// an unexported type of your package, as for context values.
func To(o Owner, key any, mk func() Attachment) Attachment {
	s := o.attachments()
	s.mu.Lock()
	if a, ok := s.byKey[key]; ok {
		s.mu.Unlock()
		return a
	}
	a := mk()
	if err := s.err; err != nil {
		s.mu.Unlock()
		a.End(err)
		return a
	}
	if s.byKey == nil {
		s.byKey = make(map[any]Attachment)
	}
	s.byKey[key] = a
	s.order = append(s.order, a)
	s.mu.Unlock()
	return a
}

// Heartbeat calls every attachment's Heartbeat, in order of attachment.
func Heartbeat(ctx context.Context, s *Set) {
	s.mu.Lock()
	order := s.order
	s.mu.Unlock()
	for _, a := range order {
		a.Heartbeat(ctx)
	}
}

// End ends s with err, once: it calls every attachment's End, in order of
// attachment; an attachment made later is ended at once (To).
func End(s *Set, err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	order := s.order
	s.byKey, s.order = nil, nil
	s.mu.Unlock()
	for _, a := range order {
		a.End(err)
	}
}
