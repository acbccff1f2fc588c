package redisstore

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// FuzzDecodeHits checks the decoding of hitScript's reply (a Redis reply
// is input from the network) for one or two windows: it never panics; a
// reply of the wrong length or shape is errMalformed; a decoded reply has
// one hit per window decided, every window but the last admitted, the
// second decided only after the first admitted, counts of at least one,
// all at the reply's time, and the first window's next slot as the reply
// says.
func FuzzDecodeHits(f *testing.F) {
	enc := func(vs ...int64) []byte {
		b := make([]byte, 0, 8*len(vs))
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		return b
	}
	const now = 1_700_000_000_000_000
	for _, c := range []struct {
		two   bool
		reply []byte
	}{
		{false, enc(now, 1, 1, now)},
		{false, enc(now, 0, 5, now-1000)},
		{true, enc(now, 1, 3, now-10, 1, 1, now)},
		{true, enc(now, 1, 3, now-10, 0, 9, now-20)},
		{true, enc(now, 0, 5, now)},
		{true, enc(now, 0, 5, now, 1, 1, now)}, // refused, then a second window
		{false, enc(now, 2, 1, now)},
		{false, enc(now, 1, 0, now)},
		{false, enc(now, 1, 1)},
		{false, enc()},
		{false, enc(-1<<63, 1, 1<<62, 1<<63-1)},
	} {
		f.Add(c.two, c.reply)
	}
	f.Fuzz(func(t *testing.T, two bool, reply []byte) {
		ws := []window{{limit: 5, window: time.Minute}}
		if two {
			ws = append(ws, window{limit: 50, window: time.Hour})
		}
		res := make([]int64, len(reply)/8)
		for i := range res {
			res[i] = int64(binary.LittleEndian.Uint64(reply[8*i:]))
		}
		hits, err := decodeHits(res, ws)
		if err != nil {
			if !errors.Is(err, errMalformed) || hits != nil {
				t.Fatalf("%v: %v, %v", res, hits, err)
			}
			return
		}
		if len(res) != 1+3*len(hits) || len(hits) < 1 || len(hits) > len(ws) {
			t.Fatalf("%v: %d hits for %d windows", res, len(hits), len(ws))
		}
		for i, h := range hits {
			last := i == len(hits)-1
			if !last && !h.Allowed || last && h.Allowed && len(hits) < len(ws) {
				t.Fatalf("%v: hit %d %+v of %d", res, i, h, len(hits))
			}
			if h.Count < 1 || int64(h.Count) != res[2+3*i] || h.Allowed != (res[1+3*i] == 1) {
				t.Fatalf("%v: hit %d %+v", res, i, h)
			}
			if !h.At.Equal(time.UnixMicro(res[0])) {
				t.Fatalf("%v: hit %d at %v", res, i, h.At)
			}
		}
		if want := time.Duration(res[3]-res[0])*time.Microsecond + ws[0].window; hits[0].NextSlot != want {
			t.Fatalf("%v: next slot %v, want %v", res, hits[0].NextSlot, want)
		}
	})
}
