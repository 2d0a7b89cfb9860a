package sse

import (
	"strconv"
	"sync"

	"github.com/vmgate/vmgate/internal/errs"
)

// Default caps on the event streams one caller holds open at once (docs/security.md
// 34). A stream holds a connection, a few goroutines and a follower of a task or
// an operation for as long as the client likes: without a cap one viewer held 500
// (1 529 goroutines). A browser shows a handful of live pages; `vmgate … watch`
// holds one; a script following many tasks at once follows an operation instead.
const (
	DefaultPerSession = 8
	DefaultPerUser    = 32
)

// RetryAfter is the wait a refused stream is told to take: a slot frees when one
// of the caller's streams ends, which nothing here can predict, so it is a pace
// for a client that retries, not a promise.
const RetryAfter = 5

// Limits are the caps of a Limiter. Zero takes the default; a negative cap is no
// cap.
type Limits struct {
	PerSession int // streams of one session (a login, or one API token) at once
	PerUser    int // streams of one user, all sessions and tokens together, at once
}

// Limiter counts the open event streams of each user and session of this
// process, for every front end that streams (the API's and the web UI's share
// one). It is safe for concurrent use; a nil *Limiter caps nothing.
type Limiter struct {
	perSession, perUser int

	mu       sync.Mutex
	users    map[int64]int
	sessions map[string]int
	open     int
}

// NewLimiter returns a limiter with caps l.
func NewLimiter(l Limits) *Limiter {
	return &Limiter{perSession: capOf(l.PerSession, DefaultPerSession), perUser: capOf(l.PerUser, DefaultPerUser),
		users: map[int64]int{}, sessions: map[string]int{}}
}

func capOf(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0 // no cap
	}
	return v
}

// Acquire takes a stream slot of user userID and session (a login session's id,
// or an API token's "token:" name: auth.Principal.AuditSession). It is refused,
// 429 too_many_streams with Retry-After, when either already holds its cap. The
// caller calls release, once, when the stream ends.
func (l *Limiter) Acquire(userID int64, session string) (release func(), err error) {
	if l == nil {
		return func() {}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.perSession > 0 && l.sessions[session] >= l.perSession:
		return nil, tooMany(l.perSession, "one session")
	case l.perUser > 0 && l.users[userID] >= l.perUser:
		return nil, tooMany(l.perUser, "one user")
	}
	l.sessions[session]++
	l.users[userID]++
	l.open++
	var once sync.Once
	return func() { once.Do(func() { l.release(userID, session) }) }, nil
}

func (l *Limiter) release(userID int64, session string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sessions[session]--; l.sessions[session] <= 0 {
		delete(l.sessions, session)
	}
	if l.users[userID]--; l.users[userID] <= 0 {
		delete(l.users, userID)
	}
	l.open--
}

func tooMany(n int, who string) *errs.Error {
	return &errs.Error{Kind: errs.RateLimited, Reason: errs.ReasonTooManyStreams, RetryAfter: RetryAfter,
		Message: "there are " + strconv.Itoa(n) + " event streams open, the most " + who +
			" may hold at once: close a live page or a watch, then try again"}
}

// Open is how many streams are open now, for the metrics.
func (l *Limiter) Open() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}
