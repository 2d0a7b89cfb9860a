// Package fleet is vmgate's register of PVE clusters: it validates and stores each
// cluster with its API token sealed (AES-256-GCM), connects to it on registration to
// check the token and learn the other nodes as failover endpoints, keeps one PVE client
// (one transport, kept alive) per cluster, decides who may act on which cluster
// (grants), and reads the inventory (nodes, VMs, a VM's status).
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

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// Config is what New needs.
type Config struct {
	Store   store.Store
	SealKey []byte // 32 bytes; see LoadOrCreateKey
	Logger  *slog.Logger
	Now     func() time.Time
	// PVETimeout bounds each PVE call (zero: the PVE client's default).
	PVETimeout time.Duration
	// Audit receives the security events the fleet notices by itself (a node that
	// presents an unexpected certificate). Admin changes are audited by the HTTP
	// layer, which knows who asked and from where. Nil drops them.
	Audit func(ctx context.Context, rec store.AuditRecord)
}

// Service is the fleet. It is safe for concurrent use.
type Service struct {
	store   store.Store
	sealer  *sealer
	log     *slog.Logger
	now     func() time.Time
	timeout time.Duration
	auditFn func(ctx context.Context, rec store.AuditRecord)

	mu      sync.Mutex
	clients map[int64]*cachedClient
	health  map[int64]healthEntry
	// tlsSeen remembers certificate mismatches already audited, so a node that keeps
	// presenting the wrong certificate is recorded once, not on every request.
	tlsSeen map[string]bool
}

// New builds the fleet. It fails when the seal key is missing or when clusters are
// registered and the key opens none of their secrets (a wrong --secret-key-file:
// better to stop at start than to fail every request).
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("fleet: no store")
	}
	sl, err := newSealer(cfg.SealKey)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	s := &Service{
		store: cfg.Store, sealer: sl, log: cfg.Logger, now: cfg.Now, timeout: cfg.PVETimeout,
		auditFn: cfg.Audit, clients: map[int64]*cachedClient{}, health: map[int64]healthEntry{}, tlsSeen: map[string]bool{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if err := s.checkKey(ctx); err != nil {
		return nil, err
	}
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
		if _, err := s.sealer.open(c.TokenSecretSealed, c.TokenID); err != nil {
			failed++
			s.log.Error("cluster token secret does not open", slog.Int64("cluster", c.ID), slog.String("name", c.Name))
		}
	}
	if len(cs) > 0 && failed == len(cs) {
		return fmt.Errorf("fleet: the secret key opens none of the %d clusters' token secrets: is --secret-key-file the one they were sealed with?", len(cs))
	}
	return nil
}

// Close closes every cached PVE client.
func (s *Service) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, cc := range s.clients {
		cc.client.Close()
		delete(s.clients, id)
	}
}

func (s *Service) audit(ctx context.Context, rec store.AuditRecord) {
	if s.auditFn == nil {
		return
	}
	if rec.At.IsZero() {
		rec.At = s.now()
	}
	s.auditFn(context.WithoutCancel(ctx), rec)
}

// clusterNotFound is the one answer for a cluster that does not exist and for one the
// caller has no grant on (SECURITY.md 18): the two must not be told apart.
func clusterNotFound() *errs.Error {
	return errs.R(errs.NotFound, "not_found", "cluster not found")
}

// Cluster returns one registered cluster.
func (s *Service) Cluster(ctx context.Context, id int64) (store.Cluster, error) {
	c, err := s.store.ClusterByID(ctx, id)
	if errs.KindOf(err) == errs.NotFound {
		return store.Cluster{}, clusterNotFound()
	}
	return c, err
}

// List returns every registered cluster.
func (s *Service) List(ctx context.Context) ([]store.Cluster, error) {
	return s.store.ListClusters(ctx)
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
