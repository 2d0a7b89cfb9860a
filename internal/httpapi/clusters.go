package httpapi

import (
	"net/http"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
)

// clusterJSON is a cluster as admins see it: never the token secret; the CA bundle
// only as present or not.
type clusterJSON struct {
	ID                 int64          `json:"id"`
	Name               string         `json:"name"`
	Endpoints          []endpointJSON `json:"endpoints"`
	TokenID            string         `json:"tokenId"`
	Trust              string         `json:"trust"` // fingerprint, ca or insecure
	HasCACert          bool           `json:"hasCaCert"`
	InsecureSkipVerify bool           `json:"insecureSkipVerify"`
	CreatedAt          time.Time      `json:"createdAt"`
	UpdatedAt          time.Time      `json:"updatedAt"`
	PVEVersion         *string        `json:"pveVersion"` // null until vmgate has read it
}

type endpointJSON struct {
	URL         string `json:"url"`
	Node        string `json:"node,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
}

func toClusterJSON(c fleet.Cluster) clusterJSON {
	eps := make([]endpointJSON, 0, len(c.Endpoints))
	for _, e := range c.Endpoints {
		eps = append(eps, endpointJSON{URL: e.URL, Node: e.Node, Fingerprint: e.Fingerprint})
	}
	return clusterJSON{ID: c.ID, Name: c.Name, Endpoints: eps, TokenID: c.TokenID, Trust: c.Trust,
		HasCACert: c.HasCACert, InsecureSkipVerify: c.InsecureSkipVerify, CreatedAt: c.CreatedAt.UTC(), UpdatedAt: c.UpdatedAt.UTC(),
		PVEVersion: nullIfEmpty(c.PVEVersion)}
}

func (s *Server) listClusters(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	cs, err := s.fleet.List(r.Context())
	if err != nil {
		return err
	}
	out := make([]clusterJSON, 0, len(cs))
	for _, c := range cs {
		out = append(out, toClusterJSON(c))
	}
	writeData(w, out)
	return nil
}

func (s *Server) getCluster(w http.ResponseWriter, r *http.Request) error {
	id, err := pathClusterID(r)
	if err != nil {
		return err
	}
	c, err := s.fleet.Cluster(r.Context(), id)
	if err != nil {
		return err
	}
	writeData(w, toClusterJSON(c))
	return nil
}

func (s *Server) createCluster(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Name               string   `json:"name"`
		Endpoints          []string `json:"endpoints"`
		TokenID            string   `json:"tokenId"`
		TokenSecret        string   `json:"tokenSecret"`
		TLSFingerprint     string   `json:"tlsFingerprint"`
		CACert             string   `json:"caCert"`
		InsecureSkipVerify bool     `json:"insecureSkipVerify"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	c, err := s.fleet.Register(r.Context(), fleet.ClusterSpec{Name: in.Name, Endpoints: in.Endpoints, TokenID: in.TokenID,
		TokenSecret: in.TokenSecret, TLSFingerprint: in.TLSFingerprint, CACert: in.CACert, InsecureSkipVerify: in.InsecureSkipVerify})
	if err != nil {
		return err
	}
	writeData(w, toClusterJSON(c))
	return nil
}

func (s *Server) patchCluster(w http.ResponseWriter, r *http.Request) error {
	id, err := pathClusterID(r)
	if err != nil {
		return err
	}
	var in struct {
		Name               *string   `json:"name"`
		Endpoints          *[]string `json:"endpoints"`
		TokenID            *string   `json:"tokenId"`
		TokenSecret        *string   `json:"tokenSecret"`
		TLSFingerprint     *string   `json:"tlsFingerprint"`
		CACert             *string   `json:"caCert"`
		InsecureSkipVerify *bool     `json:"insecureSkipVerify"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	c, err := s.fleet.Update(r.Context(), id, fleet.ClusterPatch{Name: in.Name, Endpoints: in.Endpoints, TokenID: in.TokenID,
		TokenSecret: in.TokenSecret, TLSFingerprint: in.TLSFingerprint, CACert: in.CACert, InsecureSkipVerify: in.InsecureSkipVerify})
	if err != nil {
		return err
	}
	writeData(w, toClusterJSON(c))
	return nil
}

func (s *Server) deleteCluster(w http.ResponseWriter, r *http.Request) error {
	id, err := pathClusterID(r)
	if err != nil {
		return err
	}
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	if err := s.fleet.Delete(r.Context(), id); err != nil {
		return err
	}
	writeOK(w)
	return nil
}

type clusterGrantJSON struct {
	UserID    int64     `json:"userId"`
	ClusterID int64     `json:"clusterId"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"createdAt"`
	// Scope is null for a grant on the whole cluster (grantscope.go).
	Scope *fleet.GrantScope `json:"scope"`
}

// pathGrant reads {clusterId} and {userId}.
func pathGrant(r *http.Request) (clusterID, userID int64, err error) {
	if clusterID, err = pathClusterID(r); err != nil {
		return 0, 0, err
	}
	userID, err = parseIntParam("userId", r.PathValue("userId"), 1, 1<<53)
	return clusterID, userID, err
}

func (s *Server) putGrant(w http.ResponseWriter, r *http.Request) error {
	clusterID, userID, err := pathGrant(r)
	if err != nil {
		return err
	}
	var in struct {
		Role  string            `json:"role"`
		Scope *fleet.GrantScope `json:"scope"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	g, err := s.fleet.PutScopedGrant(r.Context(), actor(r), userID, clusterID, in.Role, in.Scope)
	if err != nil {
		return err
	}
	writeData(w, clusterGrantOf(g))
	return nil
}

func (s *Server) deleteGrant(w http.ResponseWriter, r *http.Request) error {
	clusterID, userID, err := pathGrant(r)
	if err != nil {
		return err
	}
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	if err := s.fleet.DeleteGrant(r.Context(), actor(r), userID, clusterID); err != nil {
		return err
	}
	writeOK(w)
	return nil
}

// Inventory (grant holders).

type clusterViewJSON struct {
	ID     int64  `json:"id"`
	Name   string `json:"name"`
	Role   string `json:"role"`
	Status string `json:"status"`
	// PVEVersion is the cluster's PVE version as vmgate last read it; null until then.
	PVEVersion *string `json:"pveVersion"`
}

func (s *Server) inventoryClusters(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	cs, err := s.fleet.Clusters(r.Context(), actor(r))
	if err != nil {
		return err
	}
	out := make([]clusterViewJSON, 0, len(cs))
	for _, c := range cs {
		out = append(out, clusterViewJSON{ID: c.ID, Name: c.Name, Role: c.Role, Status: c.Status, PVEVersion: nullIfEmpty(c.Version)})
	}
	writeData(w, out)
	return nil
}

// readCluster decodes a cluster read (a valid {clusterId}, no query but the
// allowed parameters, check(r) when given); the read checks the caller's viewer
// grant. It returns the cluster id.
func (s *Server) readCluster(r *http.Request, check func() error, allowed ...string) (int64, error) {
	id, err := pathClusterID(r)
	if err != nil {
		return 0, err
	}
	if err := checkQuery(r, allowed...); err != nil {
		return 0, err
	}
	if check != nil {
		if err := check(); err != nil {
			return 0, err
		}
	}
	return id, nil
}

func (s *Server) clusterNodes(w http.ResponseWriter, r *http.Request) error {
	id, err := s.readCluster(r, nil)
	if err != nil {
		return err
	}
	l, err := s.fleet.NodeList(r.Context(), actor(r), id)
	if err != nil {
		return err
	}
	writeEncoded(w, http.StatusOK, "success", nodeList(l.Nodes), func(e *jsonEnc) { e.asOf(l.AsOf, "", false) })
	return nil
}

// vmQuery reads the VM list's filters and paging: each parameter at most once,
// limit an integer; fleet.VMQuery.Validate judges the values.
func vmQuery(r *http.Request) (fleet.VMQuery, error) {
	q, err := readVMQuery(r)
	if err != nil {
		return q, err
	}
	return q, q.Validate()
}

// readVMQuery is vmQuery without judging the values.
func readVMQuery(r *http.Request) (fleet.VMQuery, error) {
	var q fleet.VMQuery
	for _, p := range []struct {
		name string
		dst  *string
	}{{"node", &q.Node}, {"status", &q.Status}, {"tag", &q.Tag}, {"q", &q.Q}, {"cursor", &q.Cursor}} {
		v, err := queryOne(r, p.name)
		if err != nil {
			return q, err
		}
		if _, given := query(r)[p.name]; given && v == "" {
			return q, errs.E(errs.Invalid, "%s must not be empty", p.name)
		}
		*p.dst = v
	}
	limit, err := queryInt(r, "limit", 0, 1, fleet.MaxVMPage)
	if err != nil {
		return q, err
	}
	q.Limit = int(limit)
	return q, nil
}

// clusterVMs lists a cluster's VMs (QEMU guests; …/guests lists both kinds).
func (s *Server) clusterVMs(w http.ResponseWriter, r *http.Request) error {
	var q fleet.VMQuery
	id, err := s.readCluster(r, func() (err error) { q, err = vmQuery(r); return err },
		"node", "status", "tag", "q", "limit", "cursor")
	if err != nil {
		return err
	}
	l, err := s.fleet.VMList(r.Context(), actor(r), id, q)
	if err != nil {
		return err
	}
	writeEncoded(w, http.StatusOK, "success", vmList(l.VMs), func(e *jsonEnc) { e.asOf(l.AsOf, l.NextCursor, true) })
	return nil
}

// nullIfEmpty is s for JSON, or null when it is empty (not known).
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
