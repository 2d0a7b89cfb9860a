package httpapi

import (
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/testkit"
)

// memoryHasher is an auth.Config.Hasher that takes, before it derives, as much
// memory as argon2id takes for p (p.Memory KiB of blocks: the one large
// allocation of a derivation) and, while hold is set, keeps it until gate is
// closed: the memory of a hash in flight stays live while the test counts.
type memoryHasher struct {
	hold          atomic.Bool
	gate          chan struct{}
	running, peak atomic.Int64
}

func (h *memoryHasher) derive(pw, salt []byte, p auth.Params) []byte {
	n := h.running.Add(1)
	defer h.running.Add(-1)
	for old := h.peak.Load(); n > old && !h.peak.CompareAndSwap(old, n); old = h.peak.Load() {
	}
	blocks := make([]byte, int(p.Memory)*1024)
	for i := 0; i < len(blocks); i += 4096 {
		blocks[i] = 1
	}
	if h.hold.Load() {
		<-h.gate
	}
	runtime.KeepAlive(blocks)
	return auth.Argon2ID(pw, salt, p)
}

// liveHeap is the heap in use after a collection: what is reachable now.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestLoginFloodMemoryIsBounded (docs/security.md item 16): the memory a wrong-password
// flood takes is counted, not timed. One argon2id derivation allocates its
// parameters' memory (counted by the runtime's allocation total); then, with
// every slot's hash held in flight and the queue full, 2 000 more attempts from 50
// addresses are refused at once, and the heap still live is at least the hashes
// in flight (so the count sees them) and at most slots × one hash's memory plus a
// request body and its goroutine per login admitted, plus 2 MiB of slack, which
// holds the throttling tables (MaxTracked entries each; their bound is counted by
// TestLoginThrottleTablesBounded) — however large the flood. Not parallel: the
// live heap is this test's alone.
func TestLoginFloodMemoryIsBounded(t *testing.T) {
	const (
		slots, queue, addresses, flood = 2, 3, 50, 2000
		tracked                        = 1000             // entries of each throttling table: the flood's 2 000 accounts fill it
		perLogin                       = maxBody + 64<<10 // its body at most, its goroutine and request generously
		slack                          = 2 << 20
	)
	params := auth.Params{Memory: 4 << 10, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16} // 4 MiB a hash

	// The least of three counts: another goroutine's allocations can only add.
	perHash := uint64(1 << 62)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		auth.Argon2ID([]byte("not the password!"), make([]byte, 16), params)
		runtime.ReadMemStats(&after)
		perHash = min(perHash, after.TotalAlloc-before.TotalAlloc)
	}
	if want := uint64(params.Memory) * 1024; perHash < want || perHash > want+256<<10 {
		t.Fatalf("one argon2id derivation allocated %d bytes, want about %d", perHash, want)
	}

	h := &memoryHasher{gate: make(chan struct{})}
	e := newTestEnvWith(t, auth.Config{Argon2: params, PerAddressRate: rate.Inf, PerAddressBurst: 1,
		MaxConcurrentHashes: slots, HashQueue: queue, Hasher: h.derive, RefusalPause: -1, MaxTracked: tracked})
	e.addUser("reader", accounts.RoleUser)
	attempt := func(i int) int {
		r := bearerReq("POST", "/api/v1/user/login", "", fmt.Sprintf(`{"email":"flood-%d@example.org","password":"not the password!"}`, i))
		r.RemoteAddr = fmt.Sprintf("198.51.100.%d:4000", i%addresses+1)
		return e.send(r).Code
	}
	base := liveHeap()
	h.hold.Store(true)
	admitted := make(chan int, slots+queue)
	for i := range slots + queue {
		go func() { admitted <- attempt(i) }()
	}
	testkit.Eventually(t, "the flood filling the slots and the queue", func() error {
		if running, waiting := e.auth.HashLoad(); running != slots || waiting != queue || h.running.Load() != slots {
			return fmt.Errorf("%d running (%d hashing), %d waiting", running, h.running.Load(), waiting)
		}
		return nil
	})
	for i := slots + queue; i < flood; i++ {
		if code := attempt(i); code != http.StatusTooManyRequests {
			t.Fatalf("attempt %d with the queue full: %d", i, code)
		}
	}
	peak := liveHeap()
	close(h.gate)
	for range slots + queue {
		if code := <-admitted; code != http.StatusUnauthorized {
			t.Fatalf("an admitted login answered %d, want 401", code)
		}
	}
	if p := h.peak.Load(); p != slots {
		t.Fatalf("%d hashes in flight at once, want %d", p, slots)
	}
	grown := int64(peak) - int64(base)
	bound := int64(slots)*int64(perHash) + (slots+queue)*perLogin + slack
	t.Logf("live heap grew by %d KiB during a flood of %d logins; bound %d KiB (%d hashes × %d KiB + %d logins admitted × %d KiB + %d KiB)",
		grown>>10, flood, bound>>10, slots, perHash>>10, slots+queue, perLogin>>10, slack>>10)
	if grown < int64(slots)*int64(perHash)*9/10 {
		t.Fatalf("the live heap grew by %d bytes, less than the %d hashes in flight hold: the count does not see them", grown, slots)
	}
	if grown > bound {
		t.Fatalf("the live heap grew by %d bytes during the flood, over the bound of %d", grown, bound)
	}
}
