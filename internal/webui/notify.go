package webui

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/notify"
)

// The Notifications admin page (issue 24): the targets with their filters, Send
// test, the last deliveries with their status, and the dead letters with Retry.
func (u *UI) notifyRoutes() []route {
	return []route{
		{"GET", "/admin/notifications", admin, u.notificationsPage},
		{"POST", "/admin/notifications", admin, u.createNotifyTarget},
		{"POST", "/admin/notifications/{target}/test", admin, u.testNotifyTarget},
		{"POST", "/admin/notifications/{target}/delete", admin, u.deleteNotifyTarget},
		{"POST", "/admin/notifications/deliveries/{id}/retry", admin, u.retryNotifyDelivery},
	}
}

type notificationsView struct {
	Targets    []notify.Target
	Names      map[string]string // target id → name
	Deliveries []notify.Delivery
	Dead       []notify.Delivery
	Kinds      []string
	Events     []string
	Form       notify.TargetSpec
	Events1    map[string]bool // the form's ticked events
	Error      string
}

func (u *UI) notificationsPage(w http.ResponseWriter, r *http.Request) error {
	return u.renderNotifications(w, r, http.StatusOK, notificationsView{Form: notify.TargetSpec{Kind: notify.KindWebhook}})
}

func (u *UI) renderNotifications(w http.ResponseWriter, r *http.Request, status int, v notificationsView) error {
	a := actor(r)
	ts, err := u.notify.Targets(r.Context(), a)
	if err != nil {
		return err
	}
	if v.Deliveries, err = u.notify.Deliveries(r.Context(), a, notify.DeliveryFilter{Limit: 50}); err != nil {
		return err
	}
	if v.Dead, err = u.notify.Deliveries(r.Context(), a, notify.DeliveryFilter{State: "dead", Limit: 50}); err != nil {
		return err
	}
	v.Targets, v.Kinds, v.Events = ts, notify.Kinds, notify.EventKinds
	v.Names = map[string]string{}
	for _, t := range ts {
		v.Names[t.ID] = t.Name
	}
	if v.Events1 == nil {
		v.Events1 = map[string]bool{}
	}
	u.render(w, r, status, "notifications", u.page(w, r, "Notifications", "admin", adminView{Tab: "notifications", Data: v}))
	return nil
}

func (u *UI) createNotifyTarget(w http.ResponseWriter, r *http.Request) error {
	spec := notify.TargetSpec{Name: strings.TrimSpace(r.PostFormValue("name")), Kind: r.PostFormValue("kind"),
		Endpoint: strings.TrimSpace(r.PostFormValue("endpoint")), Secret: r.PostFormValue("secret"),
		Filters: notify.Filters{Events: r.PostForm["events"], Severity: r.PostFormValue("severity")}}
	for _, c := range strings.Fields(strings.ReplaceAll(r.PostFormValue("clusters"), ",", " ")) {
		id, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			id = -1 // the use case says what is wrong with it
		}
		spec.Filters.Clusters = append(spec.Filters.Clusters, id)
	}
	if rate := strings.TrimSpace(r.PostFormValue("rate")); rate != "" {
		n, err := strconv.Atoi(rate)
		if err != nil {
			n = -1
		}
		spec.RatePerMinute = n
	}
	t, err := u.notify.Create(r.Context(), actor(r), spec)
	if err != nil {
		msg, ok := refusal(err)
		if !ok {
			return err
		}
		spec.Secret = ""
		ticked := map[string]bool{}
		for _, e := range spec.Filters.Events {
			ticked[e] = true
		}
		return u.renderNotifications(w, r, u.status(err), notificationsView{Form: spec, Events1: ticked, Error: msg})
	}
	return u.succeeded(w, r, "/admin/notifications", "Notification target "+t.Name+" added.")
}

func (u *UI) testNotifyTarget(w http.ResponseWriter, r *http.Request) error {
	res, err := u.notify.Test(r.Context(), actor(r), r.PathValue("target"))
	if err != nil {
		return u.refused(w, r, "/admin/notifications", err)
	}
	if !res.Delivered {
		u.setNotice(w, r, notice{Kind: "error", Message: sentence("The test was not delivered: " + res.Error)})
		redirect(w, r, "/admin/notifications")
		return nil
	}
	return u.succeeded(w, r, "/admin/notifications", "The test was delivered (the receiver answered "+strconv.Itoa(res.Status)+").")
}

func (u *UI) deleteNotifyTarget(w http.ResponseWriter, r *http.Request) error {
	if r.PostFormValue("confirm") != "yes" {
		return u.refused(w, r, "/admin/notifications", errs.E(errs.Invalid, "tick the box to confirm the deletion"))
	}
	if err := u.notify.Delete(r.Context(), actor(r), r.PathValue("target")); err != nil {
		return u.refused(w, r, "/admin/notifications", err)
	}
	return u.succeeded(w, r, "/admin/notifications", "Notification target removed.")
}

func (u *UI) retryNotifyDelivery(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if _, err := u.notify.Retry(r.Context(), actor(r), id); err != nil {
		return u.refused(w, r, "/admin/notifications", err)
	}
	return u.succeeded(w, r, "/admin/notifications", "Delivery "+strconv.FormatInt(id, 10)+" will be sent again.")
}
