package host_test

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/host"
)

// TestBindFailureLogsNoCleanStop: a Start that cannot bind returns the
// error and logs neither "draining" nor "stopped cleanly" (which came
// before the caller's error line and read as a normal stop).
func TestBindFailureLogsNoCleanStop(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var logs bytes.Buffer
	h, err := host.New(host.Config{Addr: busy.Addr().String(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	err = h.Start()
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start on a busy address: %v", err)
	}
	if strings.Contains(logs.String(), "stopped cleanly") || strings.Contains(logs.String(), "draining") {
		t.Fatalf("a failed start logged a normal stop:\n%s", logs.String())
	}
}
