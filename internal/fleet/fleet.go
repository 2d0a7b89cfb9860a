// Package fleet is vmgate's register of PVE clusters: it validates and stores each
// cluster with its API token sealed (AES-256-GCM), connects to it on registration to
// check the token and learn the other nodes as failover endpoints, keeps one PVE client
// (one transport, kept alive) per cluster, decides who may act on which cluster
// (grants), and reads the inventory (nodes, VMs, a VM's status).
//
// Cluster records, grants and PVE clients are served from memory (cache.go), kept
// true by the store's change feed: a change on any replica is in force here within
// the feed's bound (docs/decisions/0014-caches-on-the-change-feed.md), so an
// authorized read costs no store round trip.
//
// The rules of cluster and grant administration live here for every front end: each
// change is audited by the fleet itself (cluster.create, cluster.update,
// cluster.delete, grant.put, grant.delete), and so is each refusal of Require
// (access.denied), attributed through internal/audit to the request in the context.
// Values leave as the fleet's own view types (Cluster, Grant, ClusterView, ...),
// never as store rows: no sealed secret reaches a front end.
//
// It knows nothing of HTTP; its errors are *errs.Error with kinds and reasons the HTTP
// layer maps to statuses. UpstreamError maps the PVE client's errors the same way for
// every package that talks to PVE.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// Config is what New needs.
type Config struct {
	Store store.Store
	// Sealer seals the clusters' token secrets (internal/seal: the key file).
	Sealer *seal.Sealer
	Logger *slog.Logger
	Now    func() time.Time
	// PVETimeout bounds each PVE call (zero: the PVE client's default).
	PVETimeout time.Duration
	// Audit records the admin changes (clusters, grants), the refusals of Require,
	// and the security events the fleet notices by itself (a node that presents an
	// unexpected certificate). Nil: a trail on Store.
	Audit *audit.Trail
	// WatchAfter is the clock the clusters' watchers wait on (watch.go)
	// [time.After]; tests drive it.
	WatchAfter func(time.Duration) <-chan time.Time
}

// Service is the fleet. It is safe for concurrent use.
type Service struct {
	store   store.Store
	sealer  *seal.Sealer
	log     *slog.Logger
	now     func() time.Time
	timeout time.Duration
	audit   *audit.Trail
	// cache holds clusters and grants, kept true by the store's change feed.
	cache       *cache
	unsubscribe func()
	// guestSnaps and nodeSnaps are each cluster's latest guest (VMs and
	// containers, from one read) and node lists.
	guestSnaps *snapshots[guestSet]

	nodeSnaps *snapshots[[]NodeView]

	mu      sync.Mutex
	clients map[int64]*cachedClient
	health  map[int64]healthEntry
	// tlsSeen remembers certificate mismatches already audited, so a node that keeps
	// presenting the wrong certificate is recorded once, not on every request.
	tlsSeen map[string]bool

	lastVM lastKnownVMs // for stale answers (lastknown.go)

	watch      watchers // one per watched cluster, for the live pages (watch.go)
	watchAfter func(time.Duration) <-chan time.Time
	watchStop  chan struct{} // closed by Close
	closeOnce  sync.Once
}

// New builds the fleet. It fails when the seal key is missing or when clusters are
// registered and the key opens none of their secrets (a wrong --secret-key-file:
// better to stop at start than to fail every request).
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("fleet: no store")
	}
	if cfg.Sealer == nil {
		return nil, errors.New("fleet: no sealer")
	}
	s := &Service{
		store: cfg.Store, sealer: cfg.Sealer, log: cfg.Logger, now: cfg.Now, timeout: cfg.PVETimeout,
		audit: cfg.Audit, clients: map[int64]*cachedClient{}, health: map[int64]healthEntry{}, tlsSeen: map[string]bool{},
		watchAfter: cfg.WatchAfter, watchStop: make(chan struct{}),
	}
	if s.watchAfter == nil {
		s.watchAfter = time.After
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.audit == nil {
		s.audit = audit.New(cfg.Store, audit.Options{Logger: s.log, Now: s.now})
	}
	if err := s.checkKey(ctx); err != nil {
		return nil, err
	}
	s.cache = newCache(cfg.Store)
	s.cache.loaded = s.closeGone
	s.guestSnaps, s.nodeSnaps = newSnapshots[guestSet](), newSnapshots[[]NodeView]()
	s.unsubscribe = cfg.Store.Subscribe(s.changed)
	return s, nil
}

// checkKey tries the key on every registered cluster's secret.
func (s *Service) checkKey(ctx context.Context) error {
	cs, err := s.store.ListClusters(ctx)
	if err != nil {
		return fmt.Errorf("fleet: list clusters: %w", err)
	}
	failed := 0
	for _, c := range cs {
		if _, err := s.openSecret(c); err != nil {
			failed++
			s.log.Error("cluster token secret does not open", slog.Int64("cluster", c.ID), slog.String("name", c.Name))
		}
	}
	if len(cs) > 0 && failed == len(cs) {
		return fmt.Errorf("fleet: the secret key opens none of the %d clusters' token secrets: is --secret-key-file the one they were sealed with?", len(cs))
	}
	return nil
}

// sealSecret seals a cluster's token secret, bound to its token id.
func (s *Service) sealSecret(secret, tokenID string) ([]byte, error) {
	return s.sealer.Seal([]byte(secret), seal.TokenSecretAAD(tokenID))
}

// openSecret opens the token secret of a stored cluster.
func (s *Service) openSecret(c store.Cluster) (string, error) {
	plain, err := s.sealer.Open(c.TokenSecretSealed, seal.TokenSecretAAD(c.TokenID))
	return string(plain), err
}

// changed follows the store's change feed: the cache drops what changed, and a
// cluster's change (or a resync) drops its inventory snapshots too, so no list
// read through old settings outlives the change.
func (s *Service) changed(c store.Change) {
	s.cache.apply(c)
	switch c.Kind {
	case store.ChangeCluster:
		s.guestSnaps.drop(c.ClusterID)
		s.nodeSnaps.drop(c.ClusterID)
	case store.ChangeResync:
		s.guestSnaps.dropAll()
		s.nodeSnaps.dropAll()
	}
}

// Close stops following the change feed and closes every cached PVE client.
func (s *Service) Close() {
	s.closeOnce.Do(func() { close(s.watchStop) })
	s.unsubscribe()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, cc := range s.clients {
		cc.client.Close()
		delete(s.clients, id)
	}
}

// clusterNotFound is the one answer for a cluster that does not exist and for one the
// caller has no grant on (docs/security.md item 18): the two must not be told apart.
func clusterNotFound() *errs.Error {
	return errs.E(errs.NotFound, "cluster not found")
}

// cluster reads one registered cluster's row from the store, for a change to it:
// reads take it from the cache (record).
func (s *Service) cluster(ctx context.Context, id int64) (store.Cluster, error) {
	c, err := s.store.ClusterByID(ctx, id)
	if errs.KindOf(err) == errs.NotFound {
		return store.Cluster{}, clusterNotFound()
	}
	return c, err
}

// Cluster returns one registered cluster.
func (s *Service) Cluster(ctx context.Context, id int64) (Cluster, error) {
	rec, err := s.record(ctx, id)
	if err != nil {
		return Cluster{}, err
	}
	return clusterOf(rec.row), nil
}

// List returns every registered cluster, by id.
func (s *Service) List(ctx context.Context) ([]Cluster, error) {
	cs, err := s.cache.clusterSet(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Cluster, 0, len(cs.sorted))
	for _, rec := range cs.sorted {
		out = append(out, clusterOf(rec.row))
	}
	return out, nil
}

// Cluster is a registered cluster as an admin sees it: never the token secret, the
// CA bundle only as present or not.
type Cluster struct {
	ID                 int64
	Name               string
	Endpoints          []Endpoint // in the order they are tried
	TokenID            string
	Trust              string // TrustFingerprint, TrustCA or TrustInsecure
	HasCACert          bool
	InsecureSkipVerify bool
	CreatedAt          time.Time
	UpdatedAt          time.Time
	// PVEVersion is pve-manager's version the cluster last answered /version
	// with (at registration, a reconnecting update, or a health check; the
	// newest an endpoint reports during a rolling upgrade); "" until known.
	PVEVersion string
}

// Endpoint is one PVE API endpoint of a cluster, given or learned.
type Endpoint struct {
	URL         string
	Node        string // the PVE node behind it, when known
	Fingerprint string // SHA-256 of its certificate; may be empty with a CA bundle
}

func clusterOf(c store.Cluster) Cluster {
	eps := make([]Endpoint, 0, len(c.Endpoints))
	for _, e := range c.Endpoints {
		eps = append(eps, Endpoint{URL: e.URL, Node: e.Node, Fingerprint: e.Fingerprint})
	}
	return Cluster{ID: c.ID, Name: c.Name, Endpoints: eps, TokenID: c.TokenID, Trust: TrustOf(c),
		HasCACert: c.CACert != "", InsecureSkipVerify: c.InsecureSkipVerify, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt,
		PVEVersion: c.PVEVersion}
}

// TrustOf says how vmgate verifies a cluster's certificates: TrustFingerprint,
// TrustCA or TrustInsecure.
func TrustOf(c store.Cluster) string {
	switch {
	case c.InsecureSkipVerify:
		return TrustInsecure
	case c.CACert != "":
		return TrustCA
	default:
		return TrustFingerprint
	}
}
