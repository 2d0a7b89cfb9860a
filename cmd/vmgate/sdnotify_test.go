package main

import (
	"net"
	"path/filepath"
	"testing"
)

// TestSDNotify: a Type=notify service manager receives READY=1 on its socket, and
// without $NOTIFY_SOCKET nothing is sent and nothing fails.
func TestSDNotify(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := sdNotify("READY=1"); err != nil {
		t.Fatalf("without NOTIFY_SOCKET: %v", err)
	}

	sock := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	for _, want := range []string{"READY=1", "STOPPING=1"} {
		if err := sdNotify(want); err != nil {
			t.Fatalf("sdNotify(%q): %v", want, err)
		}
		buf := make([]byte, 64)
		n, _, err := ln.ReadFromUnix(buf)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(buf[:n]); got != want {
			t.Errorf("socket got %q, want %q", got, want)
		}
	}
}
