package pve

import (
	"sync"
	"time"
)

// breaker is a per-endpoint circuit breaker. It opens after threshold
// consecutive failures to reach the endpoint (connection, TLS or proxy
// failures — never PVE's own error answers, which prove the endpoint alive),
// stays open for cooldown, then lets exactly one probe through (half-open): the
// probe's success closes it, its failure opens it for another cooldown.
type breaker struct {
	threshold int
	cooldown  time.Duration

	mu        sync.Mutex
	failures  int       // consecutive
	openUntil time.Time // zero while closed
	probing   bool      // a half-open probe is in flight
}

// breakerState is a snapshot for Health.
type breakerState int

const (
	stateClosed breakerState = iota
	stateOpen
	stateHalfOpen
)

func (s breakerState) String() string {
	switch s {
	case stateOpen:
		return "open"
	case stateHalfOpen:
		return "half-open"
	}
	return "closed"
}

// allow reports whether a request may go to the endpoint now. A true answer in
// the half-open state reserves the single probe; the caller must then report
// success, failure or release.
func (b *breaker) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failures < b.threshold {
		return true
	}
	if now.Before(b.openUntil) || b.probing {
		return false
	}
	b.probing = true
	return true
}

func (b *breaker) success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures, b.openUntil, b.probing = 0, time.Time{}, false
}

// failure records a failure; it returns true when this failure opened the circuit.
func (b *breaker) failure(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	wasProbe := b.probing
	b.probing = false
	if b.failures >= b.threshold {
		b.openUntil = now.Add(b.cooldown)
		return b.failures == b.threshold || wasProbe
	}
	return false
}

// release gives back a half-open probe whose attempt ended without a verdict
// (the caller's context ended).
func (b *breaker) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

func (b *breaker) state(now time.Time) breakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.failures < b.threshold:
		return stateClosed
	case now.Before(b.openUntil) && !b.probing:
		return stateOpen
	default:
		return stateHalfOpen
	}
}
