package h1

import (
	"errors"
	"io"
)

// ErrBufferFull is returned by Reader.Fill when the buffer is at its
// bound and holds no room for more.
var ErrBufferFull = errors.New("h1: buffer full")

// Reader buffers one connection's input. Its buffer grows up to a bound
// and is kept from one message to the next. Bytes before the pin (the
// head of the message being served) are never moved, so slices into them
// stay valid while the body is read.
type Reader struct {
	src  io.Reader
	buf  []byte
	r, w int
	pin  int
	max  int
	err  error // sticky read error
}

// NewReader returns a Reader over src with a buffer of size bytes that
// may grow to max bytes.
func NewReader(src io.Reader, size, max int) *Reader {
	if max < size {
		max = size
	}
	return &Reader{src: src, buf: make([]byte, size), max: max}
}

// Reset makes the Reader read from src, keeping its buffer, with nothing
// buffered.
func (b *Reader) Reset(src io.Reader) {
	b.src, b.r, b.w, b.pin, b.err = src, 0, 0, 0, nil
}

// SetMax changes the bound the buffer may grow to.
func (b *Reader) SetMax(max int) { b.max = max }

// Buffered returns the bytes read and not yet consumed.
func (b *Reader) Buffered() []byte { return b.buf[b.r:b.w] }

// Discard consumes n buffered bytes.
func (b *Reader) Discard(n int) { b.r += n }

// Unread gives back the last n bytes consumed; they must still be in
// place (consumed and pinned, with nothing read since).
func (b *Reader) Unread(n int) { b.r -= n }

// Pin keeps the buffered bytes consumed so far in place until Unpin:
// slices into them stay valid.
func (b *Reader) Pin() { b.pin = b.r }

// Unpin releases the pin.
func (b *Reader) Unpin() { b.pin = 0 }

// Fill reads more input into the buffer, making room by moving the
// unconsumed bytes down to the pin or by growing the buffer (up to its
// bound). It returns an error only when nothing was read.
func (b *Reader) Fill() error {
	if b.err != nil {
		return b.err
	}
	if b.r == b.w {
		b.r, b.w = b.pin, b.pin
	}
	if b.w == len(b.buf) {
		switch {
		case b.r > b.pin:
			n := copy(b.buf[b.pin:], b.buf[b.r:b.w])
			b.r, b.w = b.pin, b.pin+n
		case len(b.buf) < b.max:
			nb := make([]byte, min(max(2*len(b.buf), 4096), b.max))
			copy(nb, b.buf[:b.w])
			b.buf = nb
		default:
			return ErrBufferFull
		}
	}
	for range 100 {
		n, err := b.src.Read(b.buf[b.w:])
		b.w += n
		if err != nil {
			if !isTimeout(err) {
				b.err = err // a deadline can be moved; anything else is final
			}
			if n > 0 {
				return nil
			}
			return err
		}
		if n > 0 {
			return nil
		}
	}
	b.err = io.ErrNoProgress
	return b.err
}

// Read reads into p: buffered bytes first, then straight from the
// source (large reads bypass the buffer).
func (b *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r < b.w {
		n := copy(p, b.buf[b.r:b.w])
		b.r += n
		return n, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	if len(p) >= len(b.buf)-b.pin {
		n, err := b.src.Read(p)
		if err != nil && !isTimeout(err) {
			b.err = err
		}
		return n, err
	}
	if err := b.Fill(); err != nil {
		return 0, err
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}

func isTimeout(err error) bool {
	t, ok := err.(interface{ Timeout() bool })
	return ok && t.Timeout()
}

// Buf returns the buffer (for pooling).
func (b *Reader) Buf() []byte { return b.buf }
