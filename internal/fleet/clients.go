package fleet

import (
	"bytes"
	"context"
	"log/slog"
	"slices"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// cachedClient is the one PVE client of a cluster, with the row it was built from:
// when a change of the cluster comes through the feed, the reloaded row is compared
// with it once, so a rename keeps the kept-alive connections while a changed
// endpoint, token or trust setting builds a new client.
type cachedClient struct {
	row    store.Cluster
	client *pve.Client
}

// sameConnection reports whether two rows of a cluster make the same PVE client.
func sameConnection(a, b store.Cluster) bool {
	return slices.EqualFunc(a.Endpoints, b.Endpoints, func(x, y store.Endpoint) bool {
		return x.URL == y.URL && x.Fingerprint == y.Fingerprint
	}) && a.TokenID == b.TokenID && bytes.Equal(a.TokenSecretSealed, b.TokenSecretSealed) &&
		a.CACert == b.CACert && a.InsecureSkipVerify == b.InsecureSkipVerify
}

// Client returns the cluster's PVE client: one per cluster, shared by every caller so
// that requests reuse its kept-alive connections. It comes from memory: the client
// is rebuilt only after the change feed said the cluster changed (on any replica)
// and its connection settings differ, and closed once the cluster is gone. Callers
// must not Close it.
//
// Client does not authorize: call Authorize first.
func (s *Service) Client(ctx context.Context, clusterID int64) (*pve.Client, error) {
	rec, err := s.record(ctx, clusterID)
	if err != nil {
		if errs.KindOf(err) == errs.NotFound {
			s.dropClient(clusterID)
		}
		return nil, err
	}
	return s.clientFor(rec)
}

// record returns a registered cluster from the cache; NotFound (clusterNotFound)
// when there is none.
func (s *Service) record(ctx context.Context, clusterID int64) (*clusterRecord, error) {
	cs, err := s.cache.clusterSet(ctx)
	if err != nil {
		return nil, err
	}
	rec, ok := cs.byID[clusterID]
	if !ok {
		return nil, clusterNotFound()
	}
	return rec, nil
}

// clientFor returns the client of a cached cluster record, building it when the
// record is new and its settings differ from the client's.
func (s *Service) clientFor(rec *clusterRecord) (*pve.Client, error) {
	if cl := rec.client.Load(); cl != nil {
		return cl, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cl := rec.client.Load(); cl != nil {
		return cl, nil
	}
	c := rec.row
	if cc, ok := s.clients[c.ID]; ok && sameConnection(cc.row, c) {
		rec.client.Store(cc.client)
		return cc.client, nil
	}
	cfg, err := s.clientConfig(c)
	if err != nil {
		return nil, err
	}
	cl, err := pve.New(cfg)
	if err != nil {
		return nil, errs.Wrap(errs.Internal, err, "build the PVE client of cluster %d", c.ID)
	}
	if old, ok := s.clients[c.ID]; ok {
		old.client.Close()
	}
	s.clients[c.ID] = &cachedClient{row: c, client: cl}
	rec.client.Store(cl)
	return cl, nil
}

// closeGone closes the clients of clusters a freshly loaded set no longer has
// (deleted, here or on another replica).
func (s *Service) closeGone(cs *clusterSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, cc := range s.clients {
		if _, ok := cs.byID[id]; !ok {
			cc.client.Close()
			delete(s.clients, id)
			delete(s.health, id)
		}
	}
}

func (s *Service) dropClient(clusterID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cc, ok := s.clients[clusterID]; ok {
		cc.client.Close()
		delete(s.clients, clusterID)
	}
	delete(s.health, clusterID)
}

// clientConfig turns a stored cluster into the PVE client's configuration, opening
// the sealed token secret.
func (s *Service) clientConfig(c store.Cluster) (pve.Config, error) {
	secret, err := s.openSecret(c)
	if err != nil {
		s.log.Error("cluster token secret does not open", slog.Int64("cluster", c.ID), slog.String("error", err.Error()))
		return pve.Config{}, errs.Wrap(errs.Internal, err, "open the token secret of cluster %d", c.ID)
	}
	eps := make([]pve.Endpoint, 0, len(c.Endpoints))
	for _, e := range c.Endpoints {
		eps = append(eps, pve.Endpoint{URL: e.URL, Fingerprint: e.Fingerprint})
	}
	return pve.Config{
		Endpoints:          eps,
		TokenID:            c.TokenID,
		TokenSecret:        secret,
		CACertPEM:          c.CACert,
		InsecureSkipVerify: c.InsecureSkipVerify,
		Timeout:            s.timeout,
		Logger:             s.log.With(slog.Int64("cluster", c.ID)),
	}, nil
}

// UpstreamStats are the counters of one cluster's PVE client.
type UpstreamStats struct {
	Requests     int64 // HTTP requests sent (attempts, including retries)
	NewConns     int64 // TLS connections established
	ServerCloses int64 // answers that closed the connection
	Failovers    int64 // attempts abandoned for the next endpoint
	Retries      int64 // extra read rounds
	TLSFailures  int64 // handshakes refused by the pin or the CA
}

// ClientStats returns the upstream counters of every cluster's cached PVE client,
// for the metrics endpoint. A client rebuilt after a cluster change starts from zero
// (a counter reset, which Prometheus handles).
func (s *Service) ClientStats() map[int64]UpstreamStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int64]UpstreamStats, len(s.clients))
	for id, cc := range s.clients {
		st := cc.client.Stats()
		out[id] = UpstreamStats{Requests: st.Requests, NewConns: st.NewConns, ServerCloses: st.ServerCloses,
			Failovers: st.Failovers, Retries: st.Retries, TLSFailures: st.TLSFailures}
	}
	return out
}
