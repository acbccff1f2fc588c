package h1

import (
	"bufio"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// statusLines holds "HTTP/1.1 NNN Text\r\n" for every code net/http
// names; other codes are rendered as net/http renders them.
var statusLines [1000]string

func init() {
	for code := 100; code < 1000; code++ {
		if t := http.StatusText(code); t != "" {
			statusLines[code] = "HTTP/1.1 " + strconv.Itoa(code) + " " + t + "\r\n"
		}
	}
}

// WriteStatusLine writes the HTTP/1.1 status line for code exactly as
// net/http's server does (its own reason phrase, never the upstream's).
func WriteStatusLine(w *bufio.Writer, code int) {
	if code >= 100 && code < 1000 && statusLines[code] != "" {
		_, _ = w.WriteString(statusLines[code])
		return
	}
	b := append(w.AvailableBuffer(), "HTTP/1.1 "...)
	c := strconv.AppendInt(nil, int64(code), 10)
	for len(c) < 3 {
		c = append([]byte{'0'}, c...)
	}
	b = append(b, c...)
	b = append(b, " status code "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, "\r\n"...)
	_, _ = w.Write(b)
}

// dateCache is the current "Date: ...\r\n" line, rendered once a second.
type dateLine struct {
	sec  int64
	line []byte
}

var dateCache atomic.Pointer[dateLine]

// DateLine returns "Date: <IMF-fixdate>\r\n" for now, rendered at most
// once a second. The slice must not be modified.
func DateLine(now time.Time) []byte {
	sec := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == sec {
		return d.line
	}
	b := make([]byte, 0, 40)
	b = append(b, "Date: "...)
	b = now.UTC().AppendFormat(b, http.TimeFormat)
	b = append(b, "\r\n"...)
	dateCache.Store(&dateLine{sec: sec, line: b})
	return b
}

// WriteChunkHeader writes the size line of a chunk of n bytes.
func WriteChunkHeader(w *bufio.Writer, n int) {
	if w.Available() < 20 {
		_ = w.Flush()
	}
	b := strconv.AppendUint(w.AvailableBuffer(), uint64(n), 16)
	b = append(b, '\r', '\n')
	_, _ = w.Write(b)
}

// WriteField writes one header field line.
func WriteField(w *bufio.Writer, name, value []byte) {
	_, _ = w.Write(name)
	_, _ = w.WriteString(": ")
	_, _ = w.Write(value)
	_, _ = w.WriteString("\r\n")
}

// WriteFieldString writes one header field line.
func WriteFieldString(w *bufio.Writer, name, value string) {
	if n := len(name) + len(value) + 4; w.Available() >= n {
		// In one write when it fits.
		b := append(w.AvailableBuffer(), name...)
		b = append(b, ':', ' ')
		b = append(b, value...)
		_, _ = w.Write(append(b, '\r', '\n'))
		return
	}
	_, _ = w.WriteString(name)
	_, _ = w.WriteString(": ")
	_, _ = w.WriteString(value)
	_, _ = w.WriteString("\r\n")
}

// WriteContentLength writes a Content-Length field.
func WriteContentLength(w *bufio.Writer, n int64) {
	if w.Available() < 40 {
		_ = w.Flush()
	}
	b := append(w.AvailableBuffer(), "Content-Length: "...)
	b = strconv.AppendInt(b, n, 10)
	b = append(b, '\r', '\n')
	_, _ = w.Write(b)
}
