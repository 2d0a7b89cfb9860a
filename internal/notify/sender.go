package notify

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// Defaults of SenderConfig.
const (
	DefaultLease       = time.Minute
	DefaultSendTimeout = 15 * time.Second
	DefaultMaxAge      = 24 * time.Hour
	DefaultPoll        = 250 * time.Millisecond
	DefaultFirstRetry  = 30 * time.Second
	lastRetry          = time.Hour
	fanOutBatch        = 500
	maxDigest          = 5000
	sendersAtOnce      = 8
	maxErrorText       = 500
)

// SenderStore is what Sender needs of the store.
type SenderStore interface {
	NotifyTargets(ctx context.Context) ([]store.NotifyTarget, error)
	UnfannedNotifications(ctx context.Context, limit int) ([]store.NotifyEvent, error)
	FanOutNotifications(ctx context.Context, events []int64, ds []store.NotifyDelivery, now time.Time) error
	NotifyHeads(ctx context.Context, now time.Time, limit int) ([]store.NotifyDelivery, error)
	PendingNotifyDeliveries(ctx context.Context, targetID string, limit int) ([]store.NotifyDelivery, error)
	ClaimNotifyDeliveries(ctx context.Context, ids []int64, owner string, now, until time.Time) (bool, error)
	RecordNotifyAttempt(ctx context.Context, ids []int64, owner string, a store.NotifyAttempt) error
	ReleaseNotifyDeliveries(ctx context.Context, ids []int64, owner string) error
	NotifyMessagesSince(ctx context.Context, targetID string, since time.Time) (int, error)
}

// SenderConfig is what NewSender needs; Store, Sealer and Owner are required.
type SenderConfig struct {
	Store  SenderStore
	Sealer *seal.Sealer
	// Owner names this process in the deliveries' leases (host and pid, and a
	// random part: a restarted process is another owner).
	Owner  string
	Logger *slog.Logger
	Now    func() time.Time
	// BaseURL makes the events' links absolute (the address people open vmgate
	// at); "" leaves them as paths.
	BaseURL string
	// Deny lists the addresses never sent to (--notify-deny-cidr).
	Deny []netip.Prefix
	// Lease is how long a sender holds the deliveries it sends [DefaultLease];
	// it must outlast SendTimeout by far.
	Lease time.Duration
	// SendTimeout bounds one send [DefaultSendTimeout].
	SendTimeout time.Duration
	// MaxAge is how long a delivery is retried before it is dead [DefaultMaxAge].
	MaxAge time.Duration
	// Poll is how often Run looks for work [DefaultPoll].
	Poll time.Duration
	// FirstRetry is the backoff's first wait, doubled at each failure up to an
	// hour [DefaultFirstRetry].
	FirstRetry time.Duration
	// Jitter returns a number in [0, 1) that spreads the retries [math/rand/v2].
	Jitter func() float64
	// RootCAs verify the receivers' certificates [the system's]; tests give
	// their own.
	RootCAs *x509.CertPool
	// Resolver resolves the receivers' names [net.DefaultResolver].
	Resolver *net.Resolver
}

// Sender delivers the outbox. Every replica runs one; the leases make sure no
// two send one delivery at once, and each target's deliveries go in event order.
type Sender struct {
	st          SenderStore
	sealer      *seal.Sealer
	owner       string
	log         *slog.Logger
	now         func() time.Time
	baseURL     string
	lease       time.Duration
	sendTimeout time.Duration
	maxAge      time.Duration
	poll        time.Duration
	firstRetry  time.Duration
	jitter      func() float64
	rootCAs     *x509.CertPool
	dialer      *guardedDialer
	client      *http.Client

	mu      sync.Mutex
	sent    int64 // messages delivered by this sender
	latency []time.Duration
}

// NewSender builds a sender.
func NewSender(cfg SenderConfig) *Sender {
	s := &Sender{st: cfg.Store, sealer: cfg.Sealer, owner: cfg.Owner, log: cfg.Logger, now: cfg.Now,
		baseURL: strings.TrimRight(cfg.BaseURL, "/"), lease: cfg.Lease, sendTimeout: cfg.SendTimeout, maxAge: cfg.MaxAge,
		poll: cfg.Poll, firstRetry: cfg.FirstRetry, jitter: cfg.Jitter, rootCAs: cfg.RootCAs}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.lease <= 0 {
		s.lease = DefaultLease
	}
	if s.sendTimeout <= 0 {
		s.sendTimeout = DefaultSendTimeout
	}
	if s.maxAge <= 0 {
		s.maxAge = DefaultMaxAge
	}
	if s.poll <= 0 {
		s.poll = DefaultPoll
	}
	if s.firstRetry <= 0 {
		s.firstRetry = DefaultFirstRetry
	}
	if s.jitter == nil {
		s.jitter = rand.Float64
	}
	s.dialer = &guardedDialer{deny: cfg.Deny, resolver: cfg.Resolver, dialer: net.Dialer{Timeout: s.sendTimeout}}
	s.client = &http.Client{
		Transport: &http.Transport{
			// No proxy from the environment: it would dial what the deny list
			// was meant to keep vmgate away from.
			Proxy:               nil,
			DialContext:         s.dialer.DialContext,
			TLSClientConfig:     &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2:   true,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     90 * time.Second,
		},
		// A redirect is not followed: it could lead anywhere, the deny list's
		// ranges included, and a receiver that moved should be set anew.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return s
}

// Run sends until ctx ends, looking for work every Poll.
func (s *Sender) Run(ctx context.Context) error {
	t := time.NewTicker(s.poll)
	defer t.Stop()
	for {
		n, err := s.Step(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("notifications: a round of sending failed", slog.String("error", err.Error()))
		}
		if n > 0 && err == nil && ctx.Err() == nil {
			continue // more may be waiting: look again at once
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Step does one round: it fans the outbox's new events out to the targets, then
// sends each target's next message if it is due. It returns how many messages
// it delivered.
func (s *Sender) Step(ctx context.Context) (int, error) {
	targets, err := s.st.NotifyTargets(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.fanOut(ctx, targets); err != nil {
		return 0, err
	}
	byID := make(map[string]store.NotifyTarget, len(targets))
	for _, t := range targets {
		byID[t.ID] = t
	}
	heads, err := s.st.NotifyHeads(ctx, s.now(), 0)
	if err != nil {
		return 0, err
	}
	var (
		g         errgroup.Group
		mu        sync.Mutex
		delivered int
	)
	g.SetLimit(sendersAtOnce)
	for _, h := range heads {
		t, ok := byID[h.TargetID]
		if !ok {
			continue // deleted since: its deliveries went with it
		}
		g.Go(func() error {
			n, err := s.sendHead(ctx, t, h)
			mu.Lock()
			delivered += n
			mu.Unlock()
			if err != nil {
				s.log.Warn("notifications: a delivery could not be recorded", slog.String("target", t.Name),
					slog.Int64("delivery", h.ID), slog.String("error", err.Error()))
			}
			return nil
		})
	}
	_ = g.Wait()
	return delivered, nil
}

// fanOut writes the deliveries of the outbox's new events, every event to each
// target whose filters match it.
func (s *Sender) fanOut(ctx context.Context, targets []store.NotifyTarget) error {
	filters := make([]Filters, len(targets))
	for i, t := range targets {
		filters[i] = parseFilters(t.Filters)
	}
	for range 20 { // a bounded round; the rest waits for the next
		evs, err := s.st.UnfannedNotifications(ctx, fanOutBatch)
		if err != nil || len(evs) == 0 {
			return err
		}
		ids := make([]int64, 0, len(evs))
		var ds []store.NotifyDelivery
		for _, e := range evs {
			ids = append(ids, e.ID)
			for i, t := range targets {
				if filters[i].Match(e) {
					ds = append(ds, store.NotifyDelivery{TargetID: t.ID, EventID: e.ID})
				}
			}
		}
		if err := s.st.FanOutNotifications(ctx, ids, ds, s.now()); err != nil {
			return err
		}
		if len(evs) < fanOutBatch {
			return nil
		}
	}
	return nil
}

// sendHead sends a target's next messages. With a rate limit: its head
// delivery alone or, when one message is left in its minute and more are
// waiting, a digest of everything pending. Without one: the head and the
// deliveries after it (up to runLength), one message each, in order, under one
// claim, until one fails.
func (s *Sender) sendHead(ctx context.Context, t store.NotifyTarget, head store.NotifyDelivery) (int, error) {
	now := s.now()
	batch := []store.NotifyDelivery{head}
	digest := false
	if t.RatePerMinute > 0 {
		sent, err := s.st.NotifyMessagesSince(ctx, t.ID, now.Add(-time.Minute))
		if err != nil {
			return 0, err
		}
		switch left := t.RatePerMinute - sent; {
		case left <= 0:
			return 0, nil // the minute's messages are spent: wait
		case left == 1:
			pending, err := s.st.PendingNotifyDeliveries(ctx, t.ID, maxDigest)
			if err != nil {
				return 0, err
			}
			if len(pending) > 1 && pending[0].ID == head.ID {
				batch, digest = pending, true
			}
		}
	} else {
		pending, err := s.st.PendingNotifyDeliveries(ctx, t.ID, runLength)
		if err != nil {
			return 0, err
		}
		if len(pending) > 0 && pending[0].ID == head.ID {
			batch = pending
		}
	}
	ids := make([]int64, len(batch))
	for i, d := range batch {
		ids[i] = d.ID
	}
	won, err := s.st.ClaimNotifyDeliveries(ctx, ids, s.owner, now, now.Add(s.lease))
	if err != nil || !won {
		return 0, err
	}
	if digest {
		evs := make([]store.NotifyEvent, len(batch))
		for i, d := range batch {
			evs[i] = d.Event
		}
		m := message{events: evs, id: fmt.Sprintf("digest-%d-%d", evs[0].ID, evs[len(evs)-1].ID)}
		ok, err := s.sendOne(ctx, t, head, ids, m)
		if ok {
			return 1, err
		}
		return 0, err
	}
	delivered := 0
	for i, d := range batch {
		// The claim must outlast every send made under it: stop early and give
		// the rest back rather than send past the lease.
		if ctx.Err() != nil || s.now().Sub(now)+s.sendTimeout >= s.lease*3/4 {
			return delivered, s.release(ctx, ids[i:])
		}
		ok, err := s.sendOne(ctx, t, d, ids[i:i+1], message{events: []store.NotifyEvent{d.Event}, id: strconv.FormatInt(d.EventID, 10)})
		if err != nil || !ok {
			if rerr := s.release(ctx, ids[i+1:]); err == nil {
				err = rerr
			}
			return delivered, err
		}
		delivered++
	}
	return delivered, nil
}

// runLength is how many deliveries of a target without a rate limit one claim
// covers.
const runLength = 100

// release gives back deliveries this sender claimed but did not try.
func (s *Sender) release(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.sendTimeout)
	defer cancel()
	return s.st.ReleaseNotifyDeliveries(wctx, ids, s.owner)
}

// sendOne sends m, which carries deliveries ids (head first), and records the
// outcome on all of them; it reports whether the receiver took it.
func (s *Sender) sendOne(ctx context.Context, t store.NotifyTarget, head store.NotifyDelivery, ids []int64, m message) (bool, error) {
	out := s.deliver(ctx, t, m)
	end := s.now()
	a := store.NotifyAttempt{At: end, Status: out.status}
	switch {
	case out.err == nil:
		a.State, a.MessageID = store.DeliveryDelivered, head.ID
		s.noteSent(m.events, end)
	case isPermanent(out.err):
		a.State, a.Error = store.DeliveryDead, bounded("not retried: "+out.err.Error())
	default:
		wait := out.retryAfter
		if wait <= 0 {
			wait = s.backoff(head.Attempts + 1)
		}
		if next := end.Add(wait); next.Sub(head.FirstAt) > s.maxAge {
			a.State, a.Error = store.DeliveryDead, bounded(fmt.Sprintf("given up after %s: %s", s.maxAge, out.err))
		} else {
			a.State, a.NextAt, a.Error = store.DeliveryPending, next, bounded(out.err.Error())
		}
	}
	if a.State != store.DeliveryDelivered {
		s.log.Info("notifications: not delivered", slog.String("target", t.Name), slog.String("message", m.id),
			slog.String("state", a.State), slog.String("error", out.err.Error()))
	}
	// The outcome is written even when ctx has ended: the message went out.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.sendTimeout)
	defer cancel()
	if err := s.st.RecordNotifyAttempt(wctx, ids, s.owner, a); err != nil {
		return false, err
	}
	return a.State == store.DeliveryDelivered, nil
}

// backoff is the wait before attempt n+1: FirstRetry (30 s) doubling up to an hour, each
// between half of it and all of it (jitter), so that receivers coming back are
// not met by every sender at once.
func (s *Sender) backoff(n int) time.Duration {
	d := s.firstRetry
	for i := 1; i < n && d < lastRetry; i++ {
		d *= 2
	}
	d = min(d, lastRetry)
	return d/2 + time.Duration(s.jitter()*float64(d/2))
}

// outcome is what one send got back.
type outcome struct {
	status     int
	err        error
	retryAfter time.Duration
}

func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// deliver sends m to t once.
func (s *Sender) deliver(ctx context.Context, t store.NotifyTarget, m message) outcome {
	ctx, cancel := context.WithTimeout(ctx, s.sendTimeout)
	defer cancel()
	var secret []byte
	if len(t.SecretSealed) > 0 {
		if s.sealer == nil {
			return outcome{err: permanent(errors.New("no key file to open the target's secret with"))}
		}
		v, err := s.sealer.Open(t.SecretSealed, seal.NotifySecretAAD(t.ID))
		if err != nil {
			return outcome{err: permanent(fmt.Errorf("the target's secret does not open with the key file: %w", err))}
		}
		secret = v
	}
	if t.Kind == KindSMTP {
		return s.sendMail(ctx, t, secret, m)
	}
	req, err := m.request(t, secret, s.baseURL, s.now())
	if err != nil {
		return outcome{err: err}
	}
	resp, err := s.client.Do(req.WithContext(ctx))
	if err != nil {
		var p permanentError
		if errors.As(err, &p) {
			return outcome{err: p}
		}
		return outcome{err: fmt.Errorf("send: %w", err)}
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return outcome{status: code}
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		o := outcome{status: code, err: fmt.Errorf("the receiver answered %s", resp.Status)}
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
			o.retryAfter = min(time.Duration(secs)*time.Second, lastRetry)
		}
		return o
	case code >= 300 && code < 400:
		return outcome{status: code, err: permanent(fmt.Errorf("the receiver redirects (%s, to %q): vmgate follows no redirect; set the target's new address",
			resp.Status, bounded(resp.Header.Get("Location"))))}
	default:
		return outcome{status: code, err: permanent(fmt.Errorf("the receiver refused it: %s: %s", resp.Status, printable(string(snippet))))}
	}
}

// noteSent keeps the latencies of delivered events (benchmark, metrics).
func (s *Sender) noteSent(evs []store.NotifyEvent, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent++
	if len(s.latency) < 100000 {
		for _, e := range evs {
			s.latency = append(s.latency, at.Sub(e.At))
		}
	}
}

// Latencies returns, for every event delivered by this sender, the time from
// the event to its delivery (its message's end), and how many messages it sent.
func (s *Sender) Latencies() ([]time.Duration, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.latency...), s.sent
}

func bounded(s string) string {
	if len(s) > maxErrorText {
		return s[:maxErrorText] + "…"
	}
	return s
}

// printable is a receiver's words with control characters blanked.
func printable(s string) string {
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if isControl(r) {
			return ' '
		}
		return r
	}, s))
}
