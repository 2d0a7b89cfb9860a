package console

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/vmops"
)

// BenchmarkKeystrokeEcho measures a keystroke's round trip to CT 200's shell and
// back (its echo), straight to the emulator's termproxy (as PVE's own page
// talks to it) and through vmgate's broker, in one run, and reports p50 and p99
// of each (issue 21's goal: through vmgate, p50 ≤ direct + 1 ms, p99 ≤ 1.5 ×
// direct). Each op types one character and reads until its echo arrives.
//
//	go test ./internal/console/ -run '^$' -bench KeystrokeEcho -benchtime 2000x
func BenchmarkKeystrokeEcho(b *testing.B) {
	e := newEnv(b, envOpts{})
	ctx := context.Background()

	// Direct: the emulator's termproxy with PVE's ticket, as PVE's xterm.js page.
	ct200 := pve.Guest{Kind: pve.LXC, Node: "pve1", VMID: 200}
	cp, err := e.client.TermProxy(ctx, ct200, "")
	if err != nil {
		b.Fatal(err)
	}
	direct, err := e.client.DialConsole(ctx, ct200, cp)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.CloseNow()
	if _, err := termLogin(ctx, direct, cp.User, cp.Ticket); err != nil {
		b.Fatal(err)
	}
	// Through vmgate.
	via, status := dial(b, e.srv, e.ticket(vmops.GuestCT, 200, "").Ticket)
	if status != 101 {
		b.Fatalf("WebSocket: %d", status)
	}
	for _, c := range []*websocket.Conn{direct, via} {
		readUntil(b, c, ":~# ")
	}
	lat := map[string][]time.Duration{}
	b.ResetTimer()
	for i := range b.N {
		for _, p := range []struct {
			name string
			c    *websocket.Conn
		}{{"direct", direct}, {"vmgate", via}} {
			ch := string(rune('a' + i%26))
			start := time.Now()
			if err := p.c.Write(ctx, websocket.MessageText, []byte("0:1:"+ch)); err != nil {
				b.Fatal(err)
			}
			readUntil(b, p.c, ch)
			lat[p.name] = append(lat[p.name], time.Since(start))
		}
		if i%60 == 59 { // keep the line short: Ctrl-U clears it
			for _, c := range []*websocket.Conn{direct, via} {
				_ = c.Write(ctx, websocket.MessageText, []byte("0:1:\x15"))
			}
		}
	}
	b.StopTimer()
	q := func(d []time.Duration, p float64) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[min(len(s)-1, int(float64(len(s))*p))]
	}
	for _, name := range []string{"direct", "vmgate"} {
		b.ReportMetric(float64(q(lat[name], 0.5).Microseconds()), name+"-p50-µs")
		b.ReportMetric(float64(q(lat[name], 0.99).Microseconds()), name+"-p99-µs")
	}
	b.Logf("p50 through vmgate − direct: %v; p99 ratio %.2f", q(lat["vmgate"], 0.5)-q(lat["direct"], 0.5),
		float64(q(lat["vmgate"], 0.99))/float64(q(lat["direct"], 0.99)))
}

// readUntil reads c's messages until what arrived holds want (messages may
// carry several echoes; the shell's line grows).
func readUntil(b testing.TB, c *websocket.Conn, want string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got strings.Builder
	for !strings.Contains(got.String(), want) {
		_, m, err := c.Read(ctx)
		if err != nil {
			b.Fatalf("waiting for %q: %v", want, err)
		}
		got.Write(m)
	}
}
