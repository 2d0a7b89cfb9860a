package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/auth"
)

// The server keeps the Go runtime's soft memory limit (runtime/debug.SetMemoryLimit)
// where its work needs it, by default. Without one the runtime paces collections on
// the live heap alone and hands freed pages back lazily, so a server reading at a
// few MiB of live heap sat at 60–110 MiB resident after bursts of requests and
// logins (issue 8 (docs/history.md) asks ≤ 64 MiB at 1 000 reads/s). The limit is
//
//	max(memoryFloor, 2 × live heap) + hashing reserve
//
// (the reserve: each concurrent password hash's argon2 memory and some room), re-
// judged every memoryEvery: with little live data the process stays near the floor
// plus the reserve (about 55 MiB with two cores), and a large inventory raises the
// limit with it, so the collector never has to fight for memory the data needs.
// The limit is soft: the runtime never fails an allocation for it.
const (
	memoryFloor = 32 << 20
	memoryEvery = 5 * time.Second
	// hashRoom is what a hash holds besides argon2's memory (its request, goroutine).
	hashRoom = 4 << 20
)

// memoryLimit computes the limit for a live heap and a hashing reserve.
func memoryLimit(live, reserve uint64) int64 {
	return int64(max(memoryFloor, 2*live) + reserve)
}

// hashReserve is the memory the password hashes may hold at once.
func hashReserve(slots int) uint64 {
	if slots <= 0 {
		slots = max(1, runtime.GOMAXPROCS(0)-1) // auth's default
	}
	return uint64(slots) * (uint64(auth.DefaultParams().Memory)<<10 + hashRoom)
}

// parseMemoryLimit reads --memory-limit: "auto", "off", or a size in bytes with an
// optional B, KiB, MiB or GiB.
func parseMemoryLimit(s string) (auto bool, limit int64, err error) {
	switch s = strings.TrimSpace(s); s {
	case "auto", "":
		return true, 0, nil
	case "off":
		return false, math.MaxInt64, nil
	}
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return false, 0, fmt.Errorf("--memory-limit %q: want auto, off or a size like 256MiB", s)
	}
	return false, n * mult, nil
}

// governMemory sets the limit now and, in auto mode, every memoryEvery until ctx
// ends. GOMEMLIMIT in the environment wins over auto.
func governMemory(ctx context.Context, setting string, slots int, log *slog.Logger) error {
	auto, fixed, err := parseMemoryLimit(setting)
	if err != nil {
		return err
	}
	if !auto {
		debug.SetMemoryLimit(fixed)
		return nil
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		log.Info("memory limit from GOMEMLIMIT", "limit", os.Getenv("GOMEMLIMIT"))
		return nil
	}
	reserve := hashReserve(slots)
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	set := func() {
		metrics.Read(sample)
		var live uint64
		if sample[0].Value.Kind() == metrics.KindUint64 {
			live = sample[0].Value.Uint64()
		}
		debug.SetMemoryLimit(memoryLimit(live, reserve))
	}
	set()
	go func() {
		t := time.NewTicker(memoryEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				set()
			}
		}
	}()
	return nil
}
