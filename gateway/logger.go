package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
)

// NewLogger returns the gateway's structured logger writing to w: format
// json (default) or text, level debug, info (default), warn or error.
// The gateway's access log recognises it and writes its lines to w
// directly, in the same format, without slog's generic formatting (see
// accessLog); any other logger gets the access lines through slog.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	switch level {
	case "debug":
		lv = slog.LevelDebug
	case "", "info":
		lv = slog.LevelInfo
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		return nil, fmt.Errorf("gateway: log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	ls := &lineSink{w: w}
	switch format {
	case "", "json":
		ls.json = true
		return slog.New(&logHandler{Handler: slog.NewJSONHandler(ls, opts), sink: ls}), nil
	case "text":
		return slog.New(&logHandler{Handler: slog.NewTextHandler(ls, opts), sink: ls}), nil
	}
	return nil, fmt.Errorf("gateway: log format %q: want json or text", format)
}

// lineSink serialises whole lines onto the log's writer: slog's records
// and the access log's own lines never interleave.
type lineSink struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
}

func (s *lineSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// logHandler is NewLogger's handler: slog's, plus the sink for the access
// log's direct lines.
type logHandler struct {
	slog.Handler
	sink *lineSink
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{Handler: h.Handler.WithAttrs(as), sink: h.sink}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{Handler: h.Handler.WithGroup(name), sink: h.sink}
}

// directSink returns the sink a root NewLogger logger writes to when info
// lines are enabled, else nil.
func directSink(l *slog.Logger) *lineSink {
	if l == nil {
		return nil
	}
	h, ok := l.Handler().(*logHandler)
	if !ok || !h.Enabled(context.Background(), slog.LevelInfo) {
		return nil
	}
	return h.sink
}
