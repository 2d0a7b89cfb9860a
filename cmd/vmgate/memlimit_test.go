package main

import (
	"math"
	"testing"
)

func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	reserve := hashReserve(1) // one slot: argon2's 19 MiB and the room
	if reserve != 23*mib {
		t.Fatalf("reserve of one slot %d MiB, want 23", reserve/mib)
	}
	for _, c := range []struct {
		live uint64
		want int64
	}{
		{0, 55 * mib},         // the floor
		{10 * mib, 55 * mib},  // still the floor
		{40 * mib, 103 * mib}, // twice the live heap: the data needs it
	} {
		if got := memoryLimit(c.live, reserve); got != c.want {
			t.Errorf("live %d MiB: limit %d MiB, want %d", c.live/mib, got/mib, c.want/mib)
		}
	}
	for in, want := range map[string]int64{"512MiB": 512 * mib, "2GiB": 2 << 30, "100000": 100000, "64KiB": 64 << 10,
		"7B": 7, "off": math.MaxInt64} {
		auto, got, err := parseMemoryLimit(in)
		if err != nil || auto || got != want {
			t.Errorf("%q: %v %d %v, want %d", in, auto, got, err, want)
		}
	}
	if auto, _, err := parseMemoryLimit("auto"); !auto || err != nil {
		t.Errorf("auto: %v %v", auto, err)
	}
	for _, bad := range []string{"-1", "0", "lots", "12TB", "1.5GiB", "99999999999999GiB"} {
		if _, _, err := parseMemoryLimit(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
