package s3fence

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
)

// payload is a Put's body, replayable for each attempt: the caller's
// io.ReadSeeker from its current offset, or the bytes read from any other
// io.Reader.
type payload struct {
	rs    io.ReadSeeker
	start int64  // offset of the body in rs
	size  int64  // length of the body
	md5   string // lower-case hex MD5 of the body
}

func newPayload(body io.Reader) (*payload, error) {
	if body == nil {
		body = bytes.NewReader(nil)
	}
	h := md5.New()
	if rs, ok := body.(io.ReadSeeker); ok {
		start, err := rs.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, fmt.Errorf("body: seek: %w", err)
		}
		n, err := io.Copy(h, rs)
		if err != nil {
			return nil, fmt.Errorf("body: read: %w", err)
		}
		if _, err := rs.Seek(start, io.SeekStart); err != nil {
			return nil, fmt.Errorf("body: seek: %w", err)
		}
		return &payload{rs: rs, start: start, size: n, md5: hex.EncodeToString(h.Sum(nil))}, nil
	}
	b, err := io.ReadAll(io.TeeReader(body, h))
	if err != nil {
		return nil, fmt.Errorf("body: read: %w", err)
	}
	return &payload{rs: bytes.NewReader(b), size: int64(len(b)), md5: hex.EncodeToString(h.Sum(nil))}, nil
}

// attempt returns the body of one PUT. Call finish when the PUT returns:
// the HTTP transport may still be reading the body in the background then,
// and after finish such reads fail instead of moving rs under the next
// attempt.
func (p *payload) attempt() *attemptBody { return &attemptBody{p: p} }

var errAttemptOver = errors.New("s3fence: body read after its attempt ended")

// attemptBody is a payload as one PUT sees it: an io.ReadSeeker over
// [start, start+size) of rs, with a position of its own.
type attemptBody struct {
	mu   sync.Mutex
	p    *payload
	pos  int64
	over bool
}

func (b *attemptBody) Read(buf []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.over {
		return 0, errAttemptOver
	}
	left := b.p.size - b.pos
	if left <= 0 {
		return 0, io.EOF
	}
	if int64(len(buf)) > left {
		buf = buf[:left]
	}
	if _, err := b.p.rs.Seek(b.p.start+b.pos, io.SeekStart); err != nil {
		return 0, err
	}
	n, err := b.p.rs.Read(buf)
	b.pos += int64(n)
	if errors.Is(err, io.EOF) && b.pos < b.p.size {
		err = io.ErrUnexpectedEOF // the body shrank since Put read it
	} else if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

func (b *attemptBody) Seek(offset int64, whence int) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.over {
		return 0, errAttemptOver
	}
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = b.pos + offset
	case io.SeekEnd:
		abs = b.p.size + offset
	default:
		return 0, errors.New("s3fence: body: bad whence")
	}
	if abs < 0 {
		return 0, errors.New("s3fence: body: negative position")
	}
	b.pos = abs
	return abs, nil
}

// finish ends the attempt; it waits for a Read in progress.
func (b *attemptBody) finish() {
	b.mu.Lock()
	b.over = true
	b.mu.Unlock()
}
