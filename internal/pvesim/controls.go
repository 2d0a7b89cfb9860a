package pvesim

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
)

// ControlPrefix is where the emulator's test-only controls live: no PVE
// path starts with it (PVE serves /api2/..., /novnc/, /xtermjs/, /pve2/
// and a few static files). Each control does on demand what a person or a
// maintenance hook would do outside PVE's API — install the updates over
// ssh, hold a node in its firmware, break an HA resource — so that a test
// or `vmgate server --dev`'s example hook can drive it over HTTP. They
// authenticate exactly like the API (an API token or a ticket with its
// CSRF token) and need Sys.Modify, so they are not open to anyone on
// loopback.
//
//	POST   /_pvesim/nodes/{node}/apt/install      install the pending updates (text: apt's output, "reboot-required" last when a newer kernel waits)
//	POST   /_pvesim/nodes/{node}/boot-failure     the node's next boot hangs
//	DELETE /_pvesim/nodes/{node}/boot-failure     clear it (a hanging node boots, BootTime later)
//	POST   /_pvesim/nodes/{node}/power-on         switch on a node that was shut down
//	POST   /_pvesim/nodes/{node}/ha-maintenance   ha-manager crm-command node-maintenance enable
//	DELETE /_pvesim/nodes/{node}/ha-maintenance   ... disable
//	GET    /_pvesim/nodes/{node}                  the node's power, boots, kernels, memory (NodeInfo)
//	POST   /_pvesim/ha/resources/{sid}/error      put an HA resource into the error state
//	DELETE /_pvesim/ha/resources/{sid}/error      clear it
//	GET    /_pvesim/peaks                         Peaks
//	GET    /_pvesim/journal                       Journal
//
// A maintenance hook of `vmgate server --dev` can "install" updates with
//
//	curl -sfk -X POST -H "Authorization: PVEAPIToken=$TOKEN" \
//	    "https://$VMGATE_NODE_ADDRESS:$PORT/_pvesim/nodes/$VMGATE_NODE/apt/install"
//
// whose last output line tells whether the node needs a reboot.
const ControlPrefix = "/_pvesim/"

// controlError is a control's refusal, with the HTTP status to answer.
type controlError struct {
	status int
	msg    string
}

func (e *controlError) Error() string { return e.msg }

// serveControl answers a request below ControlPrefix.
func (c *Cluster) serveControl(w http.ResponseWriter, r *http.Request) {
	c.mu.RLock()
	who, reason := c.authenticate(r.Method, r.Header.Get("Cookie"), r.Header.Get("Authorization"), r.Header.Get("CSRFPreventionToken"), c.clock.Now())
	c.mu.RUnlock()
	if reason != "" {
		writeControl(w, http.StatusUnauthorized, nil, reason)
		return
	}
	parts := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, ControlPrefix), "/"), "/")
	c.mu.RLock()
	allowed := who.isRoot() || c.hasPriv(who, "/", "Sys.Modify")
	c.mu.RUnlock()
	if !allowed {
		writeControl(w, http.StatusForbidden, nil, "Permission check failed (/, Sys.Modify)")
		return
	}
	data, err := c.control(r.Method, parts)
	var ce *controlError
	switch {
	case errors.As(err, &ce):
		writeControl(w, ce.status, nil, ce.msg)
	case err != nil:
		writeControl(w, http.StatusInternalServerError, nil, err.Error())
	default:
		if lines, ok := data.([]string); ok {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			w.Write([]byte(strings.Join(lines, "\n") + "\n"))
			return
		}
		writeControl(w, http.StatusOK, data, "")
	}
}

// control dispatches a control; the result is JSON data, or apt's output
// lines.
func (c *Cluster) control(method string, parts []string) (any, error) {
	notFound := &controlError{http.StatusNotFound, "no such control"}
	route := method + " " + strings.Join(placeholders(parts), "/")
	switch route {
	case "GET peaks":
		return c.Peaks(), nil
	case "GET journal":
		return c.Journal(), nil
	case "GET nodes/{}":
		info, ok := c.Node(parts[1])
		if !ok {
			return nil, noNode(parts[1])
		}
		return info, nil
	case "POST nodes/{}/apt/install":
		if !c.hasNode(parts[1]) {
			return nil, noNode(parts[1])
		}
		out, err := c.InstallUpdates(parts[1])
		if err != nil {
			return nil, &controlError{http.StatusConflict, err.Error()}
		}
		return out, nil
	case "POST nodes/{}/boot-failure", "DELETE nodes/{}/boot-failure":
		if !c.hasNode(parts[1]) {
			return nil, noNode(parts[1])
		}
		return nil, c.SetBootFailure(parts[1], method == "POST")
	case "POST nodes/{}/power-on":
		if !c.hasNode(parts[1]) {
			return nil, noNode(parts[1])
		}
		if err := c.PowerOnNode(parts[1]); err != nil {
			return nil, &controlError{http.StatusConflict, err.Error()}
		}
		return nil, nil
	case "POST nodes/{}/ha-maintenance", "DELETE nodes/{}/ha-maintenance":
		if !c.hasNode(parts[1]) {
			return nil, noNode(parts[1])
		}
		return nil, c.SetHAMaintenance(parts[1], method == "POST")
	case "POST ha/resources/{}/error", "DELETE ha/resources/{}/error":
		if err := c.SetHAError(parts[2], method == "POST"); err != nil {
			return nil, &controlError{http.StatusNotFound, err.Error()}
		}
		return nil, nil
	}
	return nil, notFound
}

// placeholders turns the variable parts of a control path into "{}".
func placeholders(parts []string) []string {
	out := append([]string(nil), parts...)
	if len(out) >= 2 && out[0] == "nodes" {
		out[1] = "{}"
	}
	if len(out) >= 3 && out[0] == "ha" && out[1] == "resources" {
		out[2] = "{}"
	}
	return out
}

func (c *Cluster) hasNode(name string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.nodes[name]
	return ok
}

func noNode(name string) error {
	return &controlError{http.StatusNotFound, "no such node '" + name + "'"}
}

// writeControl answers in PVE's JSON envelope: {"data": ...} and, for an
// error, "message".
func writeControl(w http.ResponseWriter, status int, data any, msg string) {
	body := map[string]any{"data": data}
	if msg != "" {
		body["message"] = msg + "\n"
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.Header().Set("Date", time.Now().UTC().Format(http.TimeFormat))
	w.WriteHeader(status)
	w.Write(b)
}
