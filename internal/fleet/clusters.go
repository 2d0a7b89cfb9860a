package fleet

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// Register validates spec, connects to the cluster (checking the token and learning
// the other nodes as failover endpoints) and stores it with the token secret sealed.
// A failure says which thing is wrong: a bad field (invalid_request), an endpoint that
// does not answer (cluster_unreachable, naming it), a certificate that is not the
// pinned one (tls_mismatch, naming both fingerprints), a rejected token
// (token_rejected) or a missing permission (permission_missing, with PVE's text).
//
// Every attempt is audited as cluster.create, with the spec's fields but the secret
// (and the CA bundle only as given or not).
func (s *Service) Register(ctx context.Context, spec ClusterSpec) (Cluster, error) {
	c, err := s.register(ctx, spec)
	rec := store.AuditRecord{Action: "cluster.create", ClusterID: c.ID, Target: "cluster:" + spec.Name, Result: audit.Result(err),
		Params: audit.Params(map[string]any{"name": spec.Name, "endpoints": spec.Endpoints, "tokenId": spec.TokenID,
			"tlsFingerprint": spec.TLSFingerprint, "caCert": spec.CACert != "", "insecureSkipVerify": spec.InsecureSkipVerify})}
	if err == nil {
		rec.Target = clusterTarget(c.ID)
	}
	s.audit.Record(ctx, rec)
	if err != nil {
		return Cluster{}, err
	}
	return clusterOf(c), nil
}

func clusterTarget(id int64) string { return "cluster:" + strconv.FormatInt(id, 10) }

func (s *Service) register(ctx context.Context, spec ClusterSpec) (store.Cluster, error) {
	v, err := spec.validate()
	if err != nil {
		return store.Cluster{}, err
	}
	// A taken name fails before vmgate spends seconds connecting; the store's unique
	// constraint still decides a race.
	if err := s.nameFree(ctx, v.name, 0); err != nil {
		return store.Cluster{}, err
	}
	eps, version, err := s.connect(ctx, connectTarget{endpoints: v.endpoints, tokenID: v.tokenID, secret: v.secret, trust: v.trust})
	if err != nil {
		return store.Cluster{}, err
	}
	sealed, err := s.sealSecret(v.secret, v.tokenID)
	if err != nil {
		return store.Cluster{}, err
	}
	c, err := s.store.CreateCluster(ctx, store.Cluster{
		Name: v.name, Endpoints: eps, TokenID: v.tokenID, TokenSecretSealed: sealed,
		CACert: v.trust.caCert, InsecureSkipVerify: v.trust.mode == TrustInsecure, PVEVersion: version.Version,
	})
	if err != nil {
		return store.Cluster{}, nameTaken(err, v.name)
	}
	s.log.Info("cluster registered", slog.Int64("cluster", c.ID), slog.String("name", c.Name), slog.Int("endpoints", len(c.Endpoints)))
	return c, nil
}

func (s *Service) nameFree(ctx context.Context, name string, self int64) error {
	cs, err := s.store.ListClusters(ctx)
	if err != nil {
		return err
	}
	for _, c := range cs {
		if c.Name == name && c.ID != self {
			return errNameTaken(name)
		}
	}
	return nil
}

func errNameTaken(name string) error {
	return errs.R(errs.Conflict, errs.ReasonNameTaken, "a cluster named %q already exists", name)
}

// nameTaken turns the store's unique-name conflict into errNameTaken.
func nameTaken(err error, name string) error {
	if errs.KindOf(err) == errs.Conflict {
		return errNameTaken(name)
	}
	return err
}

// Update changes a cluster. A change of the endpoints, the token or the trust setting
// reconnects and learns the nodes again, exactly like Register; giving endpoints,
// even unchanged, is the way to make vmgate learn a cluster's nodes anew (after a node
// joined, or a certificate was renewed). A rename alone does not touch PVE.
//
// A patch that changes nothing is refused (invalid_request) and not audited; every
// other attempt is audited as cluster.update, naming the fields given (secrets and
// the CA bundle only as "(changed)").
func (s *Service) Update(ctx context.Context, id int64, p ClusterPatch) (Cluster, error) {
	changed := p.audited()
	if len(changed) == 0 {
		return Cluster{}, invalid("nothing to change: give at least one of name, endpoints, tokenId, tokenSecret, tlsFingerprint, caCert, insecureSkipVerify")
	}
	c, err := s.update(ctx, id, p)
	s.audit.Record(ctx, store.AuditRecord{Action: "cluster.update", ClusterID: id, Target: clusterTarget(id),
		Params: audit.Params(changed), Result: audit.Result(err)})
	if err != nil {
		return Cluster{}, err
	}
	return clusterOf(c), nil
}

// audited names the fields a patch gives, for the audit record.
func (p ClusterPatch) audited() map[string]any {
	changed := map[string]any{}
	set := func(name string, present bool, v any) {
		if present {
			changed[name] = v
		}
	}
	set("name", p.Name != nil, p.Name)
	set("endpoints", p.Endpoints != nil, p.Endpoints)
	set("tokenId", p.TokenID != nil, p.TokenID)
	set("tokenSecret", p.TokenSecret != nil, "(changed)")
	set("tlsFingerprint", p.TLSFingerprint != nil, p.TLSFingerprint)
	set("caCert", p.CACert != nil, "(changed)")
	set("insecureSkipVerify", p.InsecureSkipVerify != nil, p.InsecureSkipVerify)
	return changed
}

func (s *Service) update(ctx context.Context, id int64, p ClusterPatch) (store.Cluster, error) {
	c, err := s.cluster(ctx, id)
	if err != nil {
		return store.Cluster{}, err
	}
	secret, err := s.openSecret(c)
	if err != nil && p.TokenSecret == nil {
		return store.Cluster{}, errs.Wrap(errs.Internal, err, "open the token secret of cluster %d", id)
	}

	name := c.Name
	if p.Name != nil {
		if err := validName(*p.Name); err != nil {
			return store.Cluster{}, err
		}
		if *p.Name != c.Name {
			if err := s.nameFree(ctx, *p.Name, id); err != nil {
				return store.Cluster{}, err
			}
		}
		name = *p.Name
	}

	t := connectTarget{tokenID: c.TokenID, secret: secret, pins: map[string]string{}}
	for _, e := range c.Endpoints {
		t.endpoints = append(t.endpoints, e.URL)
		t.pins[e.URL] = e.Fingerprint
	}
	reconnect := false
	if p.Endpoints != nil {
		if t.endpoints, err = normalizeEndpoints(*p.Endpoints); err != nil {
			return store.Cluster{}, err
		}
		reconnect = true
	}
	if p.TokenID != nil || p.TokenSecret != nil {
		if p.TokenID != nil {
			t.tokenID = *p.TokenID
		}
		if p.TokenSecret != nil {
			t.secret = *p.TokenSecret
		}
		if err := checkToken(t.tokenID, t.secret); err != nil {
			return store.Cluster{}, err
		}
		reconnect = reconnect || t.tokenID != c.TokenID || t.secret != secret
	}
	if p.TLSFingerprint != nil || p.CACert != nil || p.InsecureSkipVerify != nil {
		if t.trust, err = checkTrust(deref(p.TLSFingerprint), deref(p.CACert), p.InsecureSkipVerify != nil && *p.InsecureSkipVerify); err != nil {
			return store.Cluster{}, err
		}
		if t.trust.mode != TrustFingerprint {
			t.pins = nil
		}
		reconnect = true
	} else {
		t.trust = trust{mode: TrustOf(c), caCert: c.CACert}
	}

	eps := c.Endpoints
	var version pve.Version
	if reconnect {
		if eps, version, err = s.connect(ctx, t); err != nil {
			return store.Cluster{}, err
		}
	}
	sealed := c.TokenSecretSealed
	if t.tokenID != c.TokenID || t.secret != secret {
		if sealed, err = s.sealSecret(t.secret, t.tokenID); err != nil {
			return store.Cluster{}, err
		}
	}
	c.Name, c.Endpoints, c.TokenID, c.TokenSecretSealed = name, eps, t.tokenID, sealed
	c.CACert, c.InsecureSkipVerify = t.trust.caCert, t.trust.mode == TrustInsecure
	out, err := s.store.UpdateCluster(ctx, c)
	if err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return store.Cluster{}, clusterNotFound()
		}
		return store.Cluster{}, nameTaken(err, name)
	}
	if version.Version != "" && version.Version != out.PVEVersion {
		if err := s.store.SetClusterPVEVersion(ctx, id, version.Version); err == nil {
			out.PVEVersion = version.Version
		}
	}
	s.log.Info("cluster updated", slog.Int64("cluster", id), slog.Bool("reconnected", reconnect))
	return out, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// Delete removes a cluster and its grants, and closes its PVE client. Its tasks and
// audit records stay. Every attempt is audited as cluster.delete.
func (s *Service) Delete(ctx context.Context, id int64) error {
	err := s.delete(ctx, id)
	s.audit.Record(ctx, store.AuditRecord{Action: "cluster.delete", ClusterID: id, Target: clusterTarget(id), Result: audit.Result(err)})
	return err
}

func (s *Service) delete(ctx context.Context, id int64) error {
	if _, err := s.cluster(ctx, id); err != nil {
		return err
	}
	if err := s.store.DeleteCluster(ctx, id); err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return clusterNotFound()
		}
		return err
	}
	s.dropClient(id)
	s.log.Info("cluster deleted", slog.Int64("cluster", id))
	return nil
}
