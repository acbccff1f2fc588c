package redisconn

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/redis/go-redis/v9"
)

// DefaultLogEvery is how often [InstallLogger]'s logger lets a line
// through: go-redis logs every failed dial, which during an outage is one
// line per operation.
const DefaultLogEvery = 10 * time.Second

// InstallLogger routes go-redis's process-wide logger through h: each
// message is a slog record at level Warn with message "redis client" and
// attribute detail, with every address, host name and URL replaced (see
// [Redact]), and at most one record per DefaultLogEvery (the next record
// after a quiet period carries the number suppressed in attribute
// suppressed). Call it once at start-up, before opening clients; it
// affects every go-redis client in the process.
func InstallLogger(h slog.Handler) {
	redis.SetLogger(NewLogger(h, DefaultLogEvery, nil))
}

// Logger is a go-redis logger (the redis.SetLogger interface) that writes
// redacted, rate-limited records to a slog handler. It is safe for
// concurrent use.
type Logger struct {
	log   *slog.Logger
	every time.Duration
	clk   clock.Clock

	mu         sync.Mutex
	next       time.Time
	suppressed int
}

// NewLogger returns a Logger writing to h at most one record per every
// (0: every record), on clk (nil: real time).
func NewLogger(h slog.Handler, every time.Duration, clk clock.Clock) *Logger {
	return &Logger{log: slog.New(h), every: every, clk: clock.Or(clk)}
}

// Printf implements go-redis's logging interface.
func (l *Logger) Printf(ctx context.Context, format string, v ...any) {
	now := l.clk.Now()
	l.mu.Lock()
	if l.every > 0 && now.Before(l.next) {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.next = now.Add(l.every)
	n := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	attrs := []slog.Attr{slog.String("detail", Redact(fmt.Sprintf(format, v...)))}
	if n > 0 {
		attrs = append(attrs, slog.Int("suppressed", n))
	}
	if ctx == nil {
		ctx = context.Background()
	}
	l.log.LogAttrs(ctx, slog.LevelWarn, "redis client", attrs...)
}

var redactions = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://\S*`), "<url>"},
	{regexp.MustCompile(`\[[0-9A-Za-z:.%]+\](:\d+)?`), "<addr>"},
	{regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b`), "<addr>"},
	{regexp.MustCompile(`(?i)\b[0-9a-f]{0,4}(:[0-9a-f]{0,4}){2,7}(%\w+)?`), "<addr>"},
	{regexp.MustCompile(`(?i)\b[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*:\d{1,5}\b`), "<addr>"},
	{regexp.MustCompile(`(?i)\blookup \S+`), "lookup <host>"},
	{regexp.MustCompile(`(?i)\b((dial|read|write) (tcp|tcp4|tcp6|unix)) [^\s<]\S*?(:?)(\s|$)`), "$1 <addr>$4$5"},
	{regexp.MustCompile(`/[^\s:]+\.sock\b`), "<addr>"},
}

// Redact removes from s every URL, IPv4 and IPv6 address, host:port pair,
// socket path and looked-up host name, so a log line or error text can be
// kept without the Redis address.
func Redact(s string) string {
	for _, r := range redactions {
		s = r.re.ReplaceAllString(s, r.with)
	}
	return s
}

// Quote is strconv.Quote of [Redact]: a redacted error text fit for a log
// attribute.
func Quote(err error) string {
	if err == nil {
		return `""`
	}
	return strconv.Quote(Redact(err.Error()))
}
