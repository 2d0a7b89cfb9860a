package sse

import (
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
)

// TestLimiterCountsStreams (docs/security.md item 34): by count, never by time — a
// session's streams up to its cap pass and the next is 429 too_many_streams with
// Retry-After; so is a user's next across sessions; a released slot is taken
// again; releasing twice gives back one slot; a negative cap is none.
func TestLimiterCountsStreams(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                string
		limits              Limits
		sessions            []string // one stream each, in order, all of user 1
		refused             int      // the index of the one refused, -1 for none
		perSession, perUser int
	}{
		{"one session at its cap", Limits{PerSession: 3, PerUser: 10}, []string{"a", "a", "a", "a"}, 3, 3, 10},
		{"a user across sessions", Limits{PerSession: 3, PerUser: 4}, []string{"a", "b", "a", "b", "c"}, 4, 3, 4},
		{"the defaults", Limits{}, repeat("a", DefaultPerSession+1), DefaultPerSession, DefaultPerSession, DefaultPerUser},
		{"no caps", Limits{PerSession: -1, PerUser: -1}, repeat("a", 100), -1, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := NewLimiter(c.limits)
			if l.perSession != c.perSession || l.perUser != c.perUser {
				t.Fatalf("caps %d/%d, want %d/%d", l.perSession, l.perUser, c.perSession, c.perUser)
			}
			var releases []func()
			refused := -1
			for i, s := range c.sessions {
				rel, err := l.Acquire(1, s)
				if err != nil {
					e, ok := errs.As(err)
					if !ok || e.Kind != errs.RateLimited || e.Reason != errs.ReasonTooManyStreams || e.RetryAfter != RetryAfter {
						t.Fatalf("refusal %v", err)
					}
					if refused >= 0 {
						t.Fatalf("streams %d and %d refused, want one", refused, i)
					}
					refused = i
					continue
				}
				releases = append(releases, rel)
			}
			if refused != c.refused {
				t.Fatalf("stream %d refused, want %d", refused, c.refused)
			}
			if l.Open() != len(releases) {
				t.Fatalf("%d open, want %d", l.Open(), len(releases))
			}
			if c.refused < 0 {
				return
			}
			// One ends (twice: the second gives back nothing); the refused one passes now, and the next does not.
			releases[0]()
			releases[0]()
			if l.Open() != len(releases)-1 {
				t.Fatalf("%d open after a release, want %d", l.Open(), len(releases)-1)
			}
			if _, err := l.Acquire(1, c.sessions[c.refused]); err != nil {
				t.Fatalf("after a release: %v", err)
			}
			if _, err := l.Acquire(1, c.sessions[c.refused]); !errs.Is(err, errs.RateLimited) {
				t.Fatalf("past the cap again: %v", err)
			}
			// Another user is not held by this one's streams.
			if _, err := l.Acquire(2, "z"); err != nil {
				t.Fatalf("another user: %v", err)
			}
		})
	}
	var none *Limiter
	if rel, err := none.Acquire(1, "a"); err != nil || none.Open() != 0 {
		t.Fatalf("a nil limiter: %v", err)
	} else {
		rel()
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}
