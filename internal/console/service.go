package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// The console types.
const (
	TypeVNC  = "vnc"  // a VM's or a container's screen, through noVNC
	TypeTerm = "term" // a container's console or a VM's serial port, through xterm.js or the CLI
)

// Defaults of Config's limits (docs/security.md item 38).
const (
	DefaultPerUser   = 4
	DefaultTotal     = 200
	DefaultIdle      = 30 * time.Minute
	DefaultMaxLength = 8 * time.Hour
	// TicketTTL is how long a console ticket may wait for its WebSocket.
	TicketTTL = 30 * time.Second
	// WebSocketPath is where a ticket is redeemed (GET, with ?ticket=).
	WebSocketPath = "/api/v1/console/ws"
	// VMSerial is the serial port a VM's terminal is on.
	VMSerial = "serial0"
)

// PVE is what the broker asks of a cluster; *pve.Client is one.
type PVE interface {
	GuestStatus(ctx context.Context, g pve.Guest) (pve.GuestStatus, error)
	VNCProxy(ctx context.Context, g pve.Guest) (pve.ConsoleProxy, error)
	TermProxy(ctx context.Context, g pve.Guest, serial string) (pve.ConsoleProxy, error)
	DialConsole(ctx context.Context, g pve.Guest, cp pve.ConsoleProxy) (*websocket.Conn, error)
}

// Grants checks a caller's grant on a cluster; *fleet.Service is one.
type Grants interface {
	// Require is the check of a use case: a refusal is audited.
	Require(ctx context.Context, a fleet.Actor, clusterID int64, need, attempt string) error
	// RequireGuest is Require for one guest: a grant scoped to pools and tags
	// must cover it, else it answers as a guest that does not exist.
	RequireGuest(ctx context.Context, a fleet.Actor, clusterID int64, g pve.Guest, need, attempt string) error
	// Authorize only answers (the broker's re-checks of open consoles).
	Authorize(ctx context.Context, a fleet.Actor, clusterID int64, need string) (string, error)
}

// Store is what the broker reads and writes; the SQL stores are one.
type Store interface {
	store.ConsoleTickets
	UserByID(ctx context.Context, id int64) (store.User, error)
	SessionByID(ctx context.Context, id string) (store.Session, error)
	UserAPITokens(ctx context.Context, userID int64) ([]store.APIToken, error)
	Subscribe(fn func(store.Change)) (cancel func())
}

// Config is what New needs. Store, Grants and Connect are required.
type Config struct {
	Store   Store
	Grants  Grants
	Connect func(ctx context.Context, clusterID int64) (PVE, error)
	Audit   *audit.Trail
	Logger  *slog.Logger
	// Registry takes the console's metrics; nil: none registered.
	Registry *prometheus.Registry
	// Now is the clock of tickets, idleness and length [time.Now]; After waits
	// on it [time.After]. Tests drive both.
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time

	PerUser   int           // consoles one user may hold open [DefaultPerUser]
	Total     int           // consoles this replica serves at once [DefaultTotal]
	Idle      time.Duration // a console with no input for this long ends [DefaultIdle]
	MaxLength time.Duration // no console lasts longer [DefaultMaxLength]
}

// Service is the console broker.
type Service struct {
	cfg   Config
	log   *slog.Logger
	unsub func()

	mu     sync.Mutex
	open   map[*Console]struct{}
	byUser map[int64]int
	closed bool

	metrics *metrics
}

// New builds the broker and follows the store's change feed (Close ends that).
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Grants == nil || cfg.Connect == nil {
		return nil, fmt.Errorf("console: Store, Grants and Connect are required")
	}
	if cfg.PerUser < 0 || cfg.Total < 0 || cfg.Idle < 0 || cfg.MaxLength < 0 {
		return nil, fmt.Errorf("console: negative limit")
	}
	cfg.PerUser = orDefault(cfg.PerUser, DefaultPerUser)
	cfg.Total = orDefault(cfg.Total, DefaultTotal)
	cfg.Idle = orDefault(cfg.Idle, DefaultIdle)
	cfg.MaxLength = orDefault(cfg.MaxLength, DefaultMaxLength)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	s := &Service{cfg: cfg, log: cfg.Logger, open: map[*Console]struct{}{}, byUser: map[int64]int{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.metrics = newMetrics(cfg.Registry, s.Count)
	s.unsub = cfg.Store.Subscribe(s.changed)
	return s, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Close ends every open console and stops following the change feed.
func (s *Service) Close() {
	s.unsub()
	s.mu.Lock()
	s.closed = true
	cs := make([]*Console, 0, len(s.open))
	for c := range s.open {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		c.end(EndShutdown)
	}
}

// Count is how many consoles this replica serves now.
func (s *Service) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// Request asks for a console of a guest.
type Request struct {
	Guest vmops.GuestRef
	// Type is TypeVNC or TypeTerm; "": TypeVNC for a VM, TypeTerm for a container.
	Type string
	// SessionID is the caller's login session ("" for an API token, whose id
	// the actor carries): the console ends with it.
	SessionID string
}

// Ticket is what Open answers: where to connect and with what, until when.
// Ticket is a secret of the caller's; URL carries it.
type Ticket struct {
	URL       string    `json:"url"`
	Ticket    string    `json:"ticket"`
	Type      string    `json:"type"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Open issues a console ticket for the guest: the caller needs an operator
// grant on its cluster (a console is keyboard control), the guest must run, and
// the caller must hold fewer consoles than a user may (429 too_many_consoles).
func (s *Service) Open(ctx context.Context, a vmops.Actor, req Request) (Ticket, error) {
	g := req.Guest
	typ, err := consoleType(g.Kind, req.Type)
	if err != nil {
		return Ticket{}, err
	}
	if req.SessionID == "" && a.APITokenID == "" {
		return Ticket{}, errs.E(errs.Internal, "console: a caller with neither session nor API token")
	}
	attempt := a.Via
	if attempt == "" {
		attempt = "console " + guestName(g)
	}
	// A guest outside a scoped grant is one that does not exist (RequireGuest).
	if err := vmops.Denied(s.cfg.Grants.RequireGuest(ctx, a.Fleet(), g.ClusterID, g.Guest(), fleet.GrantOperator, attempt)); err != nil {
		return Ticket{}, err
	}
	if err := s.roomFor(a.UserID); err != nil {
		return Ticket{}, err
	}
	api, err := s.cfg.Connect(ctx, g.ClusterID)
	if err != nil {
		return Ticket{}, err
	}
	st, err := api.GuestStatus(ctx, pveGuest(g))
	if err != nil {
		if pve.IsNotFound(err) {
			// The one 404 of a guest that is not there, which a guest outside a
			// scoped grant answers too (docs/security.md item 42).
			return Ticket{}, fleet.GuestNotFound(kindOf(g), g.VMID, g.Node)
		}
		return Ticket{}, fleet.UpstreamError(err)
	}
	if st.Status != "running" {
		if g.Kind == vmops.GuestCT {
			return Ticket{}, errs.R(errs.Conflict, errs.ReasonCTStopped, "%s is not running", guestName(g))
		}
		return Ticket{}, errs.R(errs.Conflict, errs.ReasonVMStopped, "%s is not running", guestName(g))
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret) // never fails (crypto/rand, Go 1.24+)
	text := base64.RawURLEncoding.EncodeToString(secret)
	now := s.cfg.Now()
	t := store.ConsoleTicket{Hash: ticketHash(text), UserID: a.UserID, SessionID: req.SessionID, APITokenID: a.APITokenID,
		ClusterID: g.ClusterID, Node: g.Node, VMID: g.VMID, GuestKind: string(kindOf(g)), Type: typ,
		CreatedAt: now, ExpiresAt: now.Add(TicketTTL)}
	if a.APITokenID != "" {
		t.SessionID = ""
	}
	if err := s.cfg.Store.CreateConsoleTicket(ctx, t); err != nil {
		return Ticket{}, fmt.Errorf("issue a console ticket for %s: %w", guestName(g), err)
	}
	return Ticket{URL: WebSocketPath + "?ticket=" + url.QueryEscape(text), Ticket: text, Type: typ,
		ExpiresAt: t.ExpiresAt}, nil
}

// consoleType checks the asked type against the guest's kind.
func consoleType(kind vmops.GuestKind, typ string) (string, error) {
	switch typ {
	case "":
		if kind == vmops.GuestCT {
			return TypeTerm, nil
		}
		return TypeVNC, nil
	case TypeVNC, TypeTerm:
		return typ, nil
	}
	return "", errs.E(errs.Invalid, "type must be %q or %q", TypeVNC, TypeTerm)
}

// ticketHash is how the store names a ticket.
func ticketHash(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}

func kindOf(g vmops.GuestRef) pve.GuestKind {
	if g.Kind == vmops.GuestCT {
		return pve.LXC
	}
	return pve.Qemu
}

func pveGuest(g vmops.GuestRef) pve.Guest {
	return pve.Guest{Kind: kindOf(g), Node: g.Node, VMID: int(g.VMID)}
}

func guestName(g vmops.GuestRef) string {
	if g.Kind == vmops.GuestCT {
		return fmt.Sprintf("CT %d on %s", g.VMID, g.Node)
	}
	return fmt.Sprintf("VM %d on %s", g.VMID, g.Node)
}

// errTooMany is the refusal beyond a cap.
func errTooMany(format string, args ...any) error {
	e := errs.R(errs.RateLimited, errs.ReasonTooManyConsoles, format, args...)
	e.RetryAfter = 5
	return e
}

// roomFor is nil when userID may open one more console now.
func (s *Service) roomFor(userID int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.roomLocked(userID)
}

func (s *Service) roomLocked(userID int64) error {
	switch {
	case s.closed:
		return errs.E(errs.Unavailable, "vmgate is shutting down")
	case s.byUser[userID] >= s.cfg.PerUser:
		return errTooMany("you have %d consoles open, as many as one user may; close one first", s.byUser[userID])
	case len(s.open) >= s.cfg.Total:
		return errTooMany("vmgate serves %d consoles, as many as it may; try again later", len(s.open))
	}
	return nil
}

// add takes a slot for c, or refuses beyond the caps.
func (s *Service) add(c *Console) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.roomLocked(c.t.UserID); err != nil {
		return err
	}
	s.open[c] = struct{}{}
	s.byUser[c.t.UserID]++
	return nil
}

// remove gives c's slot back.
func (s *Service) remove(c *Console) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.open[c]; !ok {
		return
	}
	delete(s.open, c)
	if s.byUser[c.t.UserID]--; s.byUser[c.t.UserID] <= 0 {
		delete(s.byUser, c.t.UserID)
	}
}

// changed asks the consoles a change of the feed may concern to check their
// credential and grant again. It runs inside the store's writers: it only signals.
func (s *Service) changed(ch store.Change) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.open {
		t := c.t
		switch {
		case ch.Kind == store.ChangeResync,
			ch.Kind == store.ChangeSession && ch.SessionID == t.SessionID && t.SessionID != "",
			ch.Kind == store.ChangeUser && ch.UserID == t.UserID,
			ch.Kind == store.ChangeAPIToken && ch.UserID == t.UserID,
			ch.Kind == store.ChangeGrant && ch.UserID == t.UserID,
			ch.Kind == store.ChangeCluster && ch.ClusterID == t.ClusterID:
			c.recheckSoon()
		}
	}
}

// holder is who a ticket was issued to, as it stands now.
type holder struct {
	actor fleet.Actor
	until time.Time // the session's or token's end
}

// live reads the credential a ticket was issued to and checks that it still
// stands (the session active, the token not deleted or expired, the user
// enabled) and still holds an operator grant on the cluster.
func (s *Service) live(ctx context.Context, t store.ConsoleTicket) (holder, error) {
	now := s.cfg.Now()
	ended := func(what string) (holder, error) {
		return holder{}, errs.E(errs.Unauthenticated, "the console's %s ended", what)
	}
	u, err := s.cfg.Store.UserByID(ctx, t.UserID)
	switch {
	case errs.Is(err, errs.NotFound):
		return ended("user")
	case err != nil:
		return holder{}, err
	case u.Disabled:
		return ended("user")
	}
	h := holder{actor: fleet.Actor{UserID: u.ID, Email: u.Email, Role: u.Role, APITokenID: t.APITokenID}}
	if t.APITokenID == "" {
		sess, err := s.cfg.Store.SessionByID(ctx, t.SessionID)
		switch {
		case errs.Is(err, errs.NotFound):
			return ended("session")
		case err != nil:
			return holder{}, err
		case !sess.Active(now) || sess.UserID != u.ID:
			return ended("session")
		}
		h.until = sess.ExpiresAt
	} else {
		toks, err := s.cfg.Store.UserAPITokens(ctx, u.ID)
		if err != nil {
			return holder{}, err
		}
		found := false
		for _, tok := range toks {
			if tok.ID != t.APITokenID {
				continue
			}
			found = true
			h.until = tok.ExpiresAt
			if tok.Grants != nil {
				h.actor.Limit = make(map[int64]string, len(tok.Grants))
				for _, g := range tok.Grants {
					h.actor.Limit[g.ClusterID] = g.Role
				}
			}
		}
		if !found || !now.Before(h.until) {
			return ended("API token")
		}
	}
	if _, err := s.cfg.Grants.Authorize(ctx, h.actor, t.ClusterID, fleet.GrantOperator); err != nil {
		return holder{}, vmops.Denied(err)
	}
	return h, nil
}
