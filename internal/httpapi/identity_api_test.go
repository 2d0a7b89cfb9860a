package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
)

// TestGroupMappingsOverHTTP: an admin's session creates, lists, replaces and
// deletes group mappings; a grant's scope is stored (sorted, duplicates
// dropped) and shown back, null for the whole cluster; a user is refused (403),
// a bad mapping is 400 (a scope PutScopedGrant would refuse: an empty one, a bad
// pool or tag; a cluster that does not exist), a missing one 404.
func TestGroupMappingsOverHTTP(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)
	cid := itoa(e.cid)
	const base = "/api/v1/identity/group-mappings"

	created := e.call("root", "POST", base, `{"group":"ops","role":"user","grants":[{"clusterId":`+cid+`,"role":"operator"}]}`).
		expect(t, http.StatusOK, "")
	var m struct {
		ID     int64  `json:"id"`
		Group  string `json:"group"`
		Role   string `json:"role"`
		Grants []struct {
			ClusterID int64           `json:"clusterId"`
			Role      string          `json:"role"`
			Scope     json.RawMessage `json:"scope"`
		} `json:"grants"`
	}
	if err := json.Unmarshal(created.env.Data, &m); err != nil || m.ID == 0 || m.Group != "ops" || len(m.Grants) != 1 ||
		m.Grants[0].ClusterID != e.cid || m.Grants[0].Role != "operator" || string(m.Grants[0].Scope) != "null" {
		t.Fatalf("created: %s %v", created.env.Data, err)
	}
	path := base + "/" + itoa(m.ID)
	scoped := e.call("root", "PUT", path, `{"group":"ops","role":"user","grants":[{"clusterId":`+cid+
		`,"role":"viewer","scope":{"pools":["team-b","team-a","team-b"],"tags":["web"]}}]}`).expect(t, http.StatusOK, "")
	if err := json.Unmarshal(scoped.env.Data, &m); err != nil || len(m.Grants) != 1 ||
		string(m.Grants[0].Scope) != `{"pools":["team-a","team-b"],"tags":["web"]}` {
		t.Fatalf("scoped: %s %v", scoped.env.Data, err)
	}
	got := e.call("root", "GET", base, "").expect(t, http.StatusOK, "")
	var listed []json.RawMessage
	if err := json.Unmarshal(got.env.Data, &listed); err != nil || len(listed) != 1 ||
		!bytes.Contains(listed[0], []byte(`"scope":{"pools":["team-a","team-b"],"tags":["web"]}`)) {
		t.Fatalf("list after the scoped update: %s %v", got.env.Data, err)
	}
	e.call("root", "PUT", path, `{"group":"ops","role":"admin","grants":[]}`).expect(t, http.StatusOK, "")
	var all []struct {
		ID   int64  `json:"id"`
		Role string `json:"role"`
	}
	json.Unmarshal(e.call("root", "GET", base, "").expect(t, http.StatusOK, "").env.Data, &all)
	if len(all) != 1 || all[0].ID != m.ID || all[0].Role != "admin" {
		t.Fatalf("list after the update: %+v", all)
	}

	for _, c := range []struct{ body, reason string }{
		{`{"group":"x","role":"user","grants":[{"clusterId":` + cid + `,"role":"viewer","scope":{"pools":[],"tags":[]}}]}`, "invalid_request"},
		{`{"group":"x","role":"user","grants":[{"clusterId":` + cid + `,"role":"viewer","scope":{"pools":["a b"]}}]}`, "invalid_request"},
		{`{"group":"x","role":"user","grants":[{"clusterId":` + cid + `,"role":"viewer","scope":{"tags":["no;tag"]}}]}`, "invalid_request"},
		{`{"group":"x","role":"user","grants":[{"clusterId":` + cid + `,"role":"viewer","scope":{"pools":["a"],"extra":1}}]}`, "invalid_request"},
		{`{"group":"x","role":"user","grants":[{"clusterId":999,"role":"viewer"}]}`, "invalid_request"},
		{`{"group":"x","role":"root"}`, "invalid_request"},
		{`{"group":"","role":"user"}`, "invalid_request"},
		{`{"group":"x","role":"user","grants":[{"clusterId":` + cid + `,"role":"viewer"},{"clusterId":` + cid + `,"role":"operator"}]}`, "invalid_request"},
	} {
		e.call("root", "POST", base, c.body).expect(t, http.StatusBadRequest, c.reason)
	}
	e.call("view", "GET", base, "").expect(t, http.StatusForbidden, "forbidden")
	e.call("view", "POST", base, `{"group":"ops","role":"admin"}`).expect(t, http.StatusForbidden, "forbidden")
	e.call("root", "DELETE", path, "").expect(t, http.StatusOK, "")
	e.call("root", "DELETE", path, "").expect(t, http.StatusNotFound, "not_found")
	e.call("root", "PUT", path, `{"group":"ops","role":"user"}`).expect(t, http.StatusNotFound, "not_found")
}

// TestIdentityLinksOverHTTP: an admin links an identity of the provider to a
// user and reads it back; linking it to another user moves it; a user may not
// read them, an unknown user is 404, a bad subject 400.
func TestIdentityLinksOverHTTP(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)
	op, view := itoa(e.users["op"].ID), itoa(e.users["view"].ID)
	link := `{"issuer":"https://idp.example","subject":"op-at-idp"}`
	e.call("root", "PUT", "/api/v1/users/"+op+"/identities", link).expect(t, http.StatusOK, "")
	var ids []struct {
		Issuer  string `json:"issuer"`
		Subject string `json:"subject"`
		UserID  int64  `json:"userId"`
	}
	json.Unmarshal(e.call("root", "GET", "/api/v1/users/"+op+"/identities", "").expect(t, http.StatusOK, "").env.Data, &ids)
	if len(ids) != 1 || ids[0].Issuer != "https://idp.example" || ids[0].Subject != "op-at-idp" || ids[0].UserID != e.users["op"].ID {
		t.Fatalf("op's identities: %+v", ids)
	}
	e.call("root", "PUT", "/api/v1/users/"+view+"/identities", link).expect(t, http.StatusOK, "")
	json.Unmarshal(e.call("root", "GET", "/api/v1/users/"+op+"/identities", "").expect(t, http.StatusOK, "").env.Data, &ids)
	if len(ids) != 0 {
		t.Fatalf("op still has %+v after the identity moved", ids)
	}
	e.call("view", "GET", "/api/v1/users/"+op+"/identities", "").expect(t, http.StatusForbidden, "forbidden")
	e.call("root", "GET", "/api/v1/users/999/identities", "").expect(t, http.StatusNotFound, "not_found")
	e.call("root", "PUT", "/api/v1/users/999/identities", link).expect(t, http.StatusNotFound, "not_found")
	e.call("root", "PUT", "/api/v1/users/"+op+"/identities", `{"issuer":"https://idp.example","subject":""}`).
		expect(t, http.StatusBadRequest, "invalid_request")
}
