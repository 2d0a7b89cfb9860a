package httpapi

import (
	"net/http"
	"regexp"
	"time"

	"github.com/vmgate/vmgate/internal/notify"
)

// The notification routes (issue 24): targets and their deliveries, for admins;
// the writes from a login session, since a target holds a secret
// (docs/security.md items 32, 44). A target's secret is never in an answer.
func (s *Server) notifyRoutes() []route {
	return []route{
		{"GET", "/api/v1/notifications/targets", admin, s.listNotifyTargets},
		{"POST", "/api/v1/notifications/targets", adminSession, s.createNotifyTarget},
		{"GET", "/api/v1/notifications/targets/{id}", admin, s.getNotifyTarget},
		{"PATCH", "/api/v1/notifications/targets/{id}", adminSession, s.patchNotifyTarget},
		{"DELETE", "/api/v1/notifications/targets/{id}", adminSession, s.deleteNotifyTarget},
		{"POST", "/api/v1/notifications/targets/{id}/test", adminSession, s.testNotifyTarget},
		{"GET", "/api/v1/notifications/deliveries", admin, s.listNotifyDeliveries},
		{"POST", "/api/v1/notifications/deliveries/{id}/retry", admin, s.retryNotifyDelivery},
	}
}

type notifyFiltersJSON struct {
	Events   []string `json:"events"`
	Clusters []int64  `json:"clusters"`
	Severity string   `json:"severity"`
}

type notifyTargetJSON struct {
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	Kind          string            `json:"kind"`
	Endpoint      string            `json:"endpoint"`
	HasSecret     bool              `json:"hasSecret"`
	Filters       notifyFiltersJSON `json:"filters"`
	RatePerMinute int               `json:"ratePerMinute"`
	CreatedAt     time.Time         `json:"createdAt"`
	UpdatedAt     time.Time         `json:"updatedAt"`
}

func toNotifyTargetJSON(t notify.Target) notifyTargetJSON {
	f := notifyFiltersJSON{Events: t.Filters.Events, Clusters: t.Filters.Clusters, Severity: t.Filters.Severity}
	if f.Events == nil {
		f.Events = []string{}
	}
	if f.Clusters == nil {
		f.Clusters = []int64{}
	}
	return notifyTargetJSON{ID: t.ID, Name: t.Name, Kind: t.Kind, Endpoint: t.Endpoint, HasSecret: t.HasSecret, Filters: f,
		RatePerMinute: t.RatePerMinute, CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC()}
}

func (f *notifyFiltersJSON) filters() notify.Filters {
	if f == nil {
		return notify.Filters{}
	}
	return notify.Filters{Events: f.Events, Clusters: f.Clusters, Severity: f.Severity}
}

var notifyTargetIDPattern = regexp.MustCompile(`^nt_[0-9a-f]{16}$`)

func (s *Server) listNotifyTargets(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	ts, err := s.notify.Targets(r.Context(), actor(r))
	if err != nil {
		return err
	}
	out := make([]notifyTargetJSON, 0, len(ts))
	for _, t := range ts {
		out = append(out, toNotifyTargetJSON(t))
	}
	writeData(w, out)
	return nil
}

func (s *Server) getNotifyTarget(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	t, err := s.notify.Target(r.Context(), actor(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeData(w, toNotifyTargetJSON(t))
	return nil
}

func (s *Server) createNotifyTarget(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Name          string             `json:"name"`
		Kind          string             `json:"kind"`
		Endpoint      string             `json:"endpoint"`
		Secret        string             `json:"secret"`
		Filters       *notifyFiltersJSON `json:"filters"`
		RatePerMinute int                `json:"ratePerMinute"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	t, err := s.notify.Create(r.Context(), actor(r), notify.TargetSpec{Name: in.Name, Kind: in.Kind, Endpoint: in.Endpoint,
		Secret: in.Secret, Filters: in.Filters.filters(), RatePerMinute: in.RatePerMinute})
	if err != nil {
		return err
	}
	writeData(w, toNotifyTargetJSON(t))
	return nil
}

func (s *Server) patchNotifyTarget(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Name          *string            `json:"name"`
		Endpoint      *string            `json:"endpoint"`
		Secret        *string            `json:"secret"`
		Filters       *notifyFiltersJSON `json:"filters"`
		RatePerMinute *int               `json:"ratePerMinute"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	p := notify.TargetPatch{Name: in.Name, Endpoint: in.Endpoint, Secret: in.Secret, RatePerMinute: in.RatePerMinute}
	if in.Filters != nil {
		f := in.Filters.filters()
		p.Filters = &f
	}
	t, err := s.notify.Update(r.Context(), actor(r), r.PathValue("id"), p)
	if err != nil {
		return err
	}
	writeData(w, toNotifyTargetJSON(t))
	return nil
}

func (s *Server) deleteNotifyTarget(w http.ResponseWriter, r *http.Request) error {
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	if err := s.notify.Delete(r.Context(), actor(r), r.PathValue("id")); err != nil {
		return err
	}
	writeOK(w)
	return nil
}

func (s *Server) testNotifyTarget(w http.ResponseWriter, r *http.Request) error {
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	res, err := s.notify.Test(r.Context(), actor(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeData(w, struct {
		Delivered bool   `json:"delivered"`
		Status    int    `json:"status,omitempty"`
		Error     string `json:"error,omitempty"`
	}{res.Delivered, res.Status, res.Error})
	return nil
}

type notifyDeliveryJSON struct {
	ID         int64      `json:"id"`
	TargetID   string     `json:"targetId"`
	EventID    int64      `json:"eventId"`
	Kind       string     `json:"kind"`
	Severity   string     `json:"severity"`
	ClusterID  int64      `json:"clusterId,omitempty"`
	Subject    string     `json:"subject"`
	Link       string     `json:"link,omitempty"`
	At         time.Time  `json:"at"`
	State      string     `json:"state"`
	Attempts   int        `json:"attempts"`
	NextAt     *time.Time `json:"nextAt,omitempty"`
	SentAt     *time.Time `json:"sentAt,omitempty"`
	LastError  string     `json:"lastError,omitempty"`
	LastStatus int        `json:"lastStatus,omitempty"`
	MessageID  int64      `json:"messageId,omitempty"`
}

func toNotifyDeliveryJSON(d notify.Delivery) notifyDeliveryJSON {
	out := notifyDeliveryJSON{ID: d.ID, TargetID: d.TargetID, EventID: d.EventID, Kind: d.Kind, Severity: d.Severity,
		ClusterID: d.ClusterID, Subject: d.Subject, Link: d.Link, At: d.At.UTC(), State: d.State, Attempts: d.Attempts,
		LastError: d.LastError, LastStatus: d.LastStatus, MessageID: d.MessageID}
	if d.State == "pending" && !d.NextAt.IsZero() {
		next := d.NextAt.UTC()
		out.NextAt = &next
	}
	if !d.SentAt.IsZero() {
		sent := d.SentAt.UTC()
		out.SentAt = &sent
	}
	return out
}

var notifyStatePattern = regexp.MustCompile(`^(pending|delivered|dead)$`)

func (s *Server) listNotifyDeliveries(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "target", "state", "limit", "before"); err != nil {
		return err
	}
	target, err := queryString(r, "target", notifyTargetIDPattern)
	if err != nil {
		return err
	}
	state, err := queryString(r, "state", notifyStatePattern)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 50, 1, 500)
	if err != nil {
		return err
	}
	before, err := queryInt(r, "before", 0, 0, 1<<53)
	if err != nil {
		return err
	}
	ds, err := s.notify.Deliveries(r.Context(), actor(r), notify.DeliveryFilter{TargetID: target, State: state,
		Limit: int(limit), BeforeID: before})
	if err != nil {
		return err
	}
	out := make([]notifyDeliveryJSON, 0, len(ds))
	for _, d := range ds {
		out = append(out, toNotifyDeliveryJSON(d))
	}
	writeData(w, out)
	return nil
}

func (s *Server) retryNotifyDelivery(w http.ResponseWriter, r *http.Request) error {
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	id, err := parseIntParam("id", r.PathValue("id"), 1, 1<<53)
	if err != nil {
		return err
	}
	d, err := s.notify.Retry(r.Context(), actor(r), id)
	if err != nil {
		return err
	}
	writeData(w, toNotifyDeliveryJSON(d))
	return nil
}
