package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"log/slog"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// cachedClient is the one PVE client of a cluster. digest covers everything the
// client was built from, so a changed endpoint, token or trust setting rebuilds it
// while a rename keeps its kept-alive connections.
type cachedClient struct {
	digest [sha256.Size]byte
	client *pve.Client
}

// connDigest hashes the connection settings of a cluster.
func connDigest(c store.Cluster) [sha256.Size]byte {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for _, e := range c.Endpoints {
		field([]byte(e.URL))
		field([]byte(e.Fingerprint))
	}
	field([]byte(c.TokenID))
	field(c.TokenSecretSealed)
	field([]byte(c.CACert))
	if c.InsecureSkipVerify {
		field([]byte{1})
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// Client returns the cluster's PVE client: one per cluster, shared by every caller so
// that requests reuse its kept-alive connections. It is rebuilt when the cluster's
// connection settings change (also when another replica changed them: the store is
// read on every call) and closed when the cluster is deleted. Callers must not Close it.
//
// Client does not authorize: call Authorize first.
func (s *Service) Client(ctx context.Context, clusterID int64) (*pve.Client, error) {
	c, err := s.store.ClusterByID(ctx, clusterID)
	if err != nil {
		if errs.KindOf(err) == errs.NotFound {
			s.dropClient(clusterID)
			return nil, clusterNotFound()
		}
		return nil, err
	}
	return s.clientFor(c)
}

func (s *Service) clientFor(c store.Cluster) (*pve.Client, error) {
	d := connDigest(c)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cc, ok := s.clients[c.ID]; ok && cc.digest == d {
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
	s.clients[c.ID] = &cachedClient{digest: d, client: cl}
	return cl, nil
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
