package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/mail"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// The kinds of target.
const (
	KindWebhook = "webhook"
	KindSlack   = "slack"
	KindTeams   = "teams"
	KindNtfy    = "ntfy"
	KindGotify  = "gotify"
	KindSMTP    = "smtp"
)

// Kinds lists the kinds of target.
var Kinds = []string{KindWebhook, KindSlack, KindTeams, KindNtfy, KindGotify, KindSMTP}

// Bounds of what a target holds (every input is hostile: docs/security.md item 21).
const (
	maxName       = 64
	maxEndpoint   = 2048
	maxSecret     = 4096
	maxFilterList = 64
	// MaxTargets caps the targets of a vmgate: each costs a delivery per event.
	MaxTargets = 50
	maxRate    = 10000
)

// Filters select the events a target gets; an empty field selects all.
type Filters struct {
	Events   []string `json:"events,omitempty"`
	Clusters []int64  `json:"clusters,omitempty"`
	Severity string   `json:"severity,omitempty"` // the least severity sent
}

// Match reports whether ev passes f. An event without a cluster (a security
// event) passes a cluster filter: it concerns every cluster.
func (f Filters) Match(ev store.NotifyEvent) bool {
	if len(f.Events) > 0 && !slices.Contains(f.Events, ev.Kind) {
		return false
	}
	if len(f.Clusters) > 0 && ev.ClusterID != 0 && !slices.Contains(f.Clusters, ev.ClusterID) {
		return false
	}
	return f.Severity == "" || severityRank(ev.Severity) >= severityRank(f.Severity)
}

func (f Filters) validate() error {
	if len(f.Events) > maxFilterList || len(f.Clusters) > maxFilterList {
		return errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "a filter names at most %d events and %d clusters", maxFilterList, maxFilterList)
	}
	for _, e := range f.Events {
		if !slices.Contains(EventKinds, e) {
			return errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "filters.events: %q is not an event (%s)", e, strings.Join(EventKinds, ", "))
		}
	}
	for _, c := range f.Clusters {
		if c <= 0 {
			return errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "filters.clusters: %d is not a cluster id", c)
		}
	}
	if f.Severity != "" && severityRank(f.Severity) == 0 {
		return errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "filters.severity: %q is not info, warning, error or critical", f.Severity)
	}
	return nil
}

func parseFilters(s string) Filters {
	var f Filters
	if s != "" {
		_ = json.Unmarshal([]byte(s), &f) // written by encodeFilters only
	}
	return f
}

func encodeFilters(f Filters) string {
	if len(f.Events) == 0 && len(f.Clusters) == 0 && f.Severity == "" {
		return ""
	}
	b, _ := json.Marshal(f)
	return string(b)
}

// Target is a target as admins see it: never its secret, only whether it has one.
type Target struct {
	ID            string
	Name          string
	Kind          string
	Endpoint      string
	HasSecret     bool
	Filters       Filters
	RatePerMinute int
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

func targetOf(t store.NotifyTarget) Target {
	endpoint := t.Endpoint
	if t.Kind == KindSlack || t.Kind == KindTeams {
		// Their incoming-webhook URLs are their secret: shown only by host.
		endpoint = redactEndpoint(endpoint) + "/…"
	}
	return Target{ID: t.ID, Name: t.Name, Kind: t.Kind, Endpoint: endpoint, HasSecret: len(t.SecretSealed) > 0,
		Filters: parseFilters(t.Filters), RatePerMinute: t.RatePerMinute, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
}

// TargetSpec is a new target.
type TargetSpec struct {
	Name          string
	Kind          string
	Endpoint      string
	Secret        string
	Filters       Filters
	RatePerMinute int
}

// TargetPatch changes a target; nil fields stay. An empty Secret removes it.
type TargetPatch struct {
	Name          *string
	Endpoint      *string
	Secret        *string
	Filters       *Filters
	RatePerMinute *int
}

// Store is what Service needs of the store.
type Store interface {
	CreateNotifyTarget(ctx context.Context, t store.NotifyTarget) (store.NotifyTarget, error)
	NotifyTargets(ctx context.Context) ([]store.NotifyTarget, error)
	NotifyTargetByID(ctx context.Context, id string) (store.NotifyTarget, error)
	UpdateNotifyTarget(ctx context.Context, t store.NotifyTarget) (store.NotifyTarget, error)
	DeleteNotifyTarget(ctx context.Context, id string) error
	NotifyDeliveries(ctx context.Context, f store.NotifyDeliveryFilter) ([]store.NotifyDelivery, error)
	RetryNotifyDelivery(ctx context.Context, id int64, now time.Time) (store.NotifyDelivery, error)
}

// Auditor records what admins do to targets.
type Auditor interface {
	Record(ctx context.Context, rec store.AuditRecord)
}

// Service is the targets' use cases: every one needs an admin, and the writes a
// login session (a target's secret is a credential: docs/security.md items 32, 44).
type Service struct {
	st     Store
	sealer *seal.Sealer
	audit  Auditor
	send   *Sender // Send test
	now    func() time.Time
}

// NewService builds the targets' use cases. sender sends the tests.
func NewService(st Store, sealer *seal.Sealer, a Auditor, sender *Sender, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{st: st, sealer: sealer, audit: a, send: sender, now: now}
}

func requireAdmin(a fleet.Actor, write bool) error {
	if !a.IsAdmin() {
		return errs.E(errs.Forbidden, "only an admin manages notifications")
	}
	if write && a.APITokenID != "" {
		return errs.R(errs.Forbidden, errs.ReasonSessionRequired,
			"notification targets hold secrets: change them from a login session, not with an API token")
	}
	return nil
}

// Targets lists the targets.
func (s *Service) Targets(ctx context.Context, a fleet.Actor) ([]Target, error) {
	if err := requireAdmin(a, false); err != nil {
		return nil, err
	}
	ts, err := s.st.NotifyTargets(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Target, 0, len(ts))
	for _, t := range ts {
		out = append(out, targetOf(t))
	}
	return out, nil
}

// Target returns one target.
func (s *Service) Target(ctx context.Context, a fleet.Actor, id string) (Target, error) {
	if err := requireAdmin(a, false); err != nil {
		return Target{}, err
	}
	if err := validID(id); err != nil {
		return Target{}, err
	}
	t, err := s.st.NotifyTargetByID(ctx, id)
	if err != nil {
		return Target{}, err
	}
	return targetOf(t), nil
}

// Create adds a target.
func (s *Service) Create(ctx context.Context, a fleet.Actor, spec TargetSpec) (Target, error) {
	t, err := s.create(ctx, a, spec)
	s.audit.Record(ctx, store.AuditRecord{Action: "notify.target_create", Target: "notify-target:" + firstNonEmpty(t.ID, spec.Name),
		Params: audit.Params(map[string]any{"name": spec.Name, "kind": spec.Kind, "endpoint": redactEndpoint(spec.Endpoint),
			"secret": spec.Secret != "", "filters": spec.Filters, "ratePerMinute": spec.RatePerMinute}),
		Result: audit.Result(err), Reason: audit.Reason(err)})
	return t, err
}

func (s *Service) create(ctx context.Context, a fleet.Actor, spec TargetSpec) (Target, error) {
	if err := requireAdmin(a, true); err != nil {
		return Target{}, err
	}
	row := store.NotifyTarget{ID: newID(), Name: spec.Name, Kind: spec.Kind, Endpoint: spec.Endpoint,
		Filters: encodeFilters(spec.Filters), RatePerMinute: spec.RatePerMinute}
	if err := validate(row, spec.Filters, spec.Secret); err != nil {
		return Target{}, err
	}
	existing, err := s.st.NotifyTargets(ctx)
	if err != nil {
		return Target{}, err
	}
	if len(existing) >= MaxTargets {
		return Target{}, errs.R(errs.Conflict, errs.ReasonNotifyTooMany, "vmgate keeps at most %d notification targets", MaxTargets)
	}
	if row.SecretSealed, err = s.seal(row.ID, spec.Secret); err != nil {
		return Target{}, err
	}
	created, err := s.st.CreateNotifyTarget(ctx, row)
	if err != nil {
		return Target{}, err
	}
	return targetOf(created), nil
}

// Update changes a target.
func (s *Service) Update(ctx context.Context, a fleet.Actor, id string, p TargetPatch) (Target, error) {
	t, err := s.update(ctx, a, id, p)
	params := map[string]any{"secret": p.Secret != nil}
	if p.Name != nil {
		params["name"] = *p.Name
	}
	if p.Endpoint != nil {
		params["endpoint"] = redactEndpoint(*p.Endpoint)
	}
	if p.Filters != nil {
		params["filters"] = *p.Filters
	}
	s.audit.Record(ctx, store.AuditRecord{Action: "notify.target_update", Target: "notify-target:" + id,
		Params: audit.Params(params), Result: audit.Result(err), Reason: audit.Reason(err)})
	return t, err
}

func (s *Service) update(ctx context.Context, a fleet.Actor, id string, p TargetPatch) (Target, error) {
	if err := requireAdmin(a, true); err != nil {
		return Target{}, err
	}
	if err := validID(id); err != nil {
		return Target{}, err
	}
	row, err := s.st.NotifyTargetByID(ctx, id)
	if err != nil {
		return Target{}, err
	}
	filters := parseFilters(row.Filters)
	if p.Name != nil {
		row.Name = *p.Name
	}
	if p.Endpoint != nil {
		row.Endpoint = *p.Endpoint
	}
	if p.Filters != nil {
		filters = *p.Filters
		row.Filters = encodeFilters(filters)
	}
	if p.RatePerMinute != nil {
		row.RatePerMinute = *p.RatePerMinute
	}
	secret := "-" // kept: validate only checks its presence
	if p.Secret != nil {
		secret = *p.Secret
	} else if len(row.SecretSealed) == 0 {
		secret = ""
	}
	if err := validate(row, filters, secret); err != nil {
		return Target{}, err
	}
	if p.Secret != nil {
		if row.SecretSealed, err = s.seal(row.ID, *p.Secret); err != nil {
			return Target{}, err
		}
	}
	updated, err := s.st.UpdateNotifyTarget(ctx, row)
	if err != nil {
		return Target{}, err
	}
	return targetOf(updated), nil
}

// Delete removes a target and its deliveries.
func (s *Service) Delete(ctx context.Context, a fleet.Actor, id string) error {
	err := requireAdmin(a, true)
	if err == nil {
		err = validID(id)
	}
	if err == nil {
		err = s.st.DeleteNotifyTarget(ctx, id)
	}
	s.audit.Record(ctx, store.AuditRecord{Action: "notify.target_delete", Target: "notify-target:" + id,
		Result: audit.Result(err), Reason: audit.Reason(err)})
	return err
}

// TestResult is what a Send test got back.
type TestResult struct {
	Delivered bool
	Status    int    // the receiver's HTTP status or SMTP code; 0: none
	Error     string // why it was not delivered
}

// Test sends a test event to a target now, outside the outbox, and says what
// the receiver answered.
func (s *Service) Test(ctx context.Context, a fleet.Actor, id string) (TestResult, error) {
	if err := requireAdmin(a, true); err != nil {
		return TestResult{}, err
	}
	if err := validID(id); err != nil {
		return TestResult{}, err
	}
	row, err := s.st.NotifyTargetByID(ctx, id)
	if err != nil {
		return TestResult{}, err
	}
	now := s.now()
	ev := store.NotifyEvent{ID: 0, Kind: EventTest, Severity: SeverityInfo, Subject: "a test from vmgate, sent by " + a.Email,
		Link: "/admin/notifications", At: now}
	out := s.send.deliver(ctx, row, message{events: []store.NotifyEvent{ev}, id: "test-" + newID()})
	res := TestResult{Delivered: out.err == nil, Status: out.status}
	if out.err != nil {
		res.Error = out.err.Error()
	}
	s.audit.Record(ctx, store.AuditRecord{Action: "notify.target_test", Target: "notify-target:" + id,
		Result: map[bool]string{true: "ok", false: "failed"}[res.Delivered], Reason: res.Error})
	return res, nil
}

// Delivery is a delivery as admins see it.
type Delivery struct {
	ID         int64
	TargetID   string
	EventID    int64
	Kind       string
	Severity   string
	ClusterID  int64
	Subject    string
	Link       string
	At         time.Time
	State      string
	Attempts   int
	NextAt     time.Time
	SentAt     time.Time
	LastError  string
	LastStatus int
	// Digest: it went in a digest whose head is MessageID.
	MessageID int64
}

func deliveryOf(d store.NotifyDelivery) Delivery {
	return Delivery{ID: d.ID, TargetID: d.TargetID, EventID: d.EventID, Kind: d.Event.Kind, Severity: d.Event.Severity,
		ClusterID: d.Event.ClusterID, Subject: d.Event.Subject, Link: d.Event.Link, At: d.Event.At, State: d.State,
		Attempts: d.Attempts, NextAt: d.NextAt, SentAt: d.SentAt, LastError: d.LastError, LastStatus: d.LastStatus,
		MessageID: d.MessageID}
}

// DeliveryFilter selects deliveries.
type DeliveryFilter struct {
	TargetID string
	State    string // pending, delivered, dead; "" all
	BeforeID int64
	Limit    int
}

// Deliveries lists the last deliveries, newest first.
func (s *Service) Deliveries(ctx context.Context, a fleet.Actor, f DeliveryFilter) ([]Delivery, error) {
	if err := requireAdmin(a, false); err != nil {
		return nil, err
	}
	if f.TargetID != "" {
		if err := validID(f.TargetID); err != nil {
			return nil, err
		}
	}
	switch f.State {
	case "", store.DeliveryPending, store.DeliveryDelivered, store.DeliveryDead:
	default:
		return nil, errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "state: %q is not pending, delivered or dead", f.State)
	}
	ds, err := s.st.NotifyDeliveries(ctx, store.NotifyDeliveryFilter{TargetID: f.TargetID, State: f.State, BeforeID: f.BeforeID, Limit: f.Limit})
	if err != nil {
		return nil, err
	}
	out := make([]Delivery, 0, len(ds))
	for _, d := range ds {
		out = append(out, deliveryOf(d))
	}
	return out, nil
}

// Retry sends a dead-lettered delivery again, with a new 24 h.
func (s *Service) Retry(ctx context.Context, a fleet.Actor, id int64) (Delivery, error) {
	err := requireAdmin(a, false)
	var d store.NotifyDelivery
	if err == nil {
		d, err = s.st.RetryNotifyDelivery(ctx, id, s.now())
	}
	s.audit.Record(ctx, store.AuditRecord{Action: "notify.delivery_retry", Target: "notify-delivery:" + strconv.FormatInt(id, 10),
		Result: audit.Result(err), Reason: audit.Reason(err)})
	if err != nil {
		return Delivery{}, err
	}
	return deliveryOf(d), nil
}

func (s *Service) seal(id, secret string) ([]byte, error) {
	if secret == "" {
		return nil, nil
	}
	if s.sealer == nil {
		return nil, errs.E(errs.Internal, "no key file to seal the secret with")
	}
	v, err := s.sealer.Seal([]byte(secret), seal.NotifySecretAAD(id))
	if err != nil {
		return nil, fmt.Errorf("seal the secret of notification target %s: %w", id, err)
	}
	return v, nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "nt_" + hex.EncodeToString(b[:])
}

func validID(id string) error {
	if len(id) != 19 || !strings.HasPrefix(id, "nt_") {
		return errs.E(errs.NotFound, "no notification target %q", id)
	}
	if _, err := hex.DecodeString(id[3:]); err != nil {
		return errs.E(errs.NotFound, "no notification target %q", id)
	}
	return nil
}

// validate checks a target as it would be stored. secret is the clear secret,
// or any non-empty text for one that is kept.
func validate(t store.NotifyTarget, f Filters, secret string) error {
	if t.Name == "" || utf8.RuneCountInString(t.Name) > maxName || strings.ContainsFunc(t.Name, isControl) {
		return errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "name: 1 to %d characters without control characters", maxName)
	}
	if !slices.Contains(Kinds, t.Kind) {
		return errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "kind: %q is not one of %s", t.Kind, strings.Join(Kinds, ", "))
	}
	if len(secret) > maxSecret {
		return errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "secret: at most %d bytes", maxSecret)
	}
	if t.RatePerMinute < 0 || t.RatePerMinute > maxRate {
		return errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "ratePerMinute: 0 (no limit) to %d", maxRate)
	}
	if err := f.validate(); err != nil {
		return err
	}
	if len(t.Endpoint) > maxEndpoint {
		return errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "endpoint: at most %d bytes", maxEndpoint)
	}
	if t.Kind == KindSMTP {
		_, err := parseSMTP(t.Endpoint)
		return err
	}
	u, err := url.Parse(t.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "endpoint: an http(s) URL without credentials in it (put them in secret)")
	}
	if t.Kind == KindWebhook && secret == "" {
		return errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "a webhook needs a secret: its requests are signed with it")
	}
	if t.Kind == KindGotify && secret == "" {
		return errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "a Gotify target needs its application token as secret")
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }

// smtpEndpoint is an SMTP target's endpoint:
// smtp://[user@]host[:587]?from=a@example.org&to=b@example.org,c@example.org
// (STARTTLS, required) or smtps://… (implicit TLS, port 465 by default).
type smtpEndpoint struct {
	implicitTLS bool
	host, port  string
	user        string
	from        string
	to          []string
}

func parseSMTP(s string) (smtpEndpoint, error) {
	bad := func(format string, args ...any) (smtpEndpoint, error) {
		return smtpEndpoint{}, errs.R(errs.Invalid, errs.ReasonNotifyInvalid, "endpoint: "+format, args...)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "smtp" && u.Scheme != "smtps") || u.Hostname() == "" || u.Path != "" && u.Path != "/" {
		return bad("smtp://[user@]host[:port]?from=…&to=…,… (STARTTLS) or smtps://… (implicit TLS)")
	}
	if _, hasPass := u.User.Password(); hasPass {
		return bad("the SMTP password goes in secret, not in the URL")
	}
	e := smtpEndpoint{implicitTLS: u.Scheme == "smtps", host: u.Hostname(), port: u.Port(), user: u.User.Username()}
	if e.port == "" {
		e.port = map[bool]string{true: "465", false: "587"}[e.implicitTLS]
	}
	q := u.Query()
	for k := range q {
		if k != "from" && k != "to" {
			return bad("unknown parameter %q (from, to)", k)
		}
	}
	from, err := mail.ParseAddress(q.Get("from"))
	if err != nil {
		return bad("from: not an e-mail address")
	}
	e.from = from.Address
	for _, t := range strings.Split(q.Get("to"), ",") {
		a, err := mail.ParseAddress(strings.TrimSpace(t))
		if err != nil {
			return bad("to: %q is not an e-mail address", t)
		}
		e.to = append(e.to, a.Address)
	}
	if len(e.to) > 20 {
		return bad("to: at most 20 addresses")
	}
	return e, nil
}

// redactEndpoint is an endpoint for the audit trail: Slack's and Teams' URLs
// carry their secret in the path, so only scheme and host are kept.
func redactEndpoint(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
