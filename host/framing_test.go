package host

import "testing"

// framingWatch notes a head with both Content-Length and
// Transfer-Encoding however the bytes are split across reads, and only
// such a head.
func TestFramingWatch(t *testing.T) {
	for _, c := range []struct {
		in   string
		want bool
	}{
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", true},
		{"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\nCONTENT-LENGTH: 3\r\n\r\n", true},
		{"POST / HTTP/1.1\nContent-Length: 3\nTransfer-Encoding:\n chunked\n\n", true},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		{"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", false},
		// Two heads, one field each: not the same request.
		{"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\nPOST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nX-Content-Length: 3\r\nX-Transfer-Encoding: chunked\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nX: Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", false},
	} {
		for _, step := range []int{1, 2, 7, len(c.in)} {
			var f framingWatch
			for i := 0; i < len(c.in); i += step {
				f.scan([]byte(c.in[i:min(i+step, len(c.in))]))
			}
			if f.sawBoth() != c.want {
				t.Errorf("%q in reads of %d: sawBoth %v, want %v", c.in, step, f.sawBoth(), c.want)
			}
		}
	}
}

func BenchmarkFramingWatch(b *testing.B) {
	body := make([]byte, 32<<10)
	for i := range body {
		body[i] = byte('a' + i%26)
		if i%80 == 79 {
			body[i] = '\n'
		}
	}
	var f framingWatch
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		f.scan(body)
	}
}
