package apitest

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func mustDoc(t *testing.T) *Spec {
	t.Helper()
	d, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// walk calls fn for every value of the document with its JSON pointer.
func walk(v any, ptr string, fn func(ptr string, v any)) {
	fn(ptr, v)
	switch c := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(c) {
			walk(c[k], ptr+"/"+escape(k), fn)
		}
	case []any:
		for i, x := range c {
			walk(x, ptr+"/"+strconv.Itoa(i), fn)
		}
	}
}

// TestDocumentIsOpenAPI31 checks what makes the document read as OpenAPI 3.1 with
// plain JSON Schema 2020-12 schemas (Load refuses anything else).
func TestDocumentIsOpenAPI31(t *testing.T) {
	d := mustDoc(t)
	if len(d.Operations()) < 30 {
		t.Fatalf("only %d operations documented", len(d.Operations()))
	}
	if _, err := Load([]byte("openapi: 3.0.3\njsonSchemaDialect: " + dialect2020 + "\npaths: {}\n")); err == nil {
		t.Error("a 3.0 document loaded")
	}
	if _, err := Load([]byte("openapi: 3.1.0\npaths: {}\n")); err == nil {
		t.Error("a document without jsonSchemaDialect loaded (the default dialect is OpenAPI's, not plain 2020-12)")
	}
}

// TestNoNullable: OpenAPI 3.0's `nullable` means nothing to a 3.1 reader, so a
// nullable field written that way rejects the nulls vmgate sends. Nothing of 3.0's
// schema dialect may come back: no nullable, no boolean exclusiveMinimum/Maximum.
func TestNoNullable(t *testing.T) {
	d := mustDoc(t)
	walk(d.Raw, "", func(ptr string, v any) {
		obj, ok := v.(map[string]any)
		if !ok {
			return
		}
		for _, k := range []string{"nullable", "x-nullable"} {
			if _, ok := obj[k]; ok {
				t.Errorf("%s has %q: write type: [T, \"null\"] (or a oneOf with type: \"null\")", ptr, k)
			}
		}
		for _, k := range []string{"exclusiveMinimum", "exclusiveMaximum"} {
			if _, ok := obj[k].(bool); ok {
				t.Errorf("%s has a boolean %s (OpenAPI 3.0); in 3.1 it is the bound itself", ptr, k)
			}
		}
	})
}

var camelCase = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)

// TestOperationIDs: every operation has an operationId, camelCase and unique.
func TestOperationIDs(t *testing.T) {
	seen := map[string]string{}
	for _, op := range mustDoc(t).Operations() {
		switch {
		case op.ID == "":
			t.Errorf("%s has no operationId", op.Key())
		case !camelCase.MatchString(op.ID):
			t.Errorf("%s: operationId %q is not camelCase", op.Key(), op.ID)
		case seen[op.ID] != "":
			t.Errorf("operationId %q is on both %s and %s", op.ID, seen[op.ID], op.Key())
		}
		seen[op.ID] = op.Key()
	}
}

// TestErrorAnswersListed: every operation lists at least one 4xx answer and the
// 500 every handler can give; every error answer is a shared response of
// components/responses, so that each status means one thing everywhere; every
// operation that needs a token lists 401; every operation that touches the store
// lists 503 (store_unavailable, issue 10 (docs/history.md)).
func TestErrorAnswersListed(t *testing.T) {
	d := mustDoc(t)
	// The operations that never touch the store.
	storeless := []string{"getHealth", "getMetrics", "getOpenAPIDocument"}
	for _, op := range d.Operations() {
		raw, err := d.Lookup(op.Pointer)
		if err != nil {
			t.Fatal(err)
		}
		codes := sortedKeys(op.responses)
		if !slices.ContainsFunc(codes, func(c string) bool { return c[0] == '4' }) {
			t.Errorf("%s lists no 4xx answer: %v", op.ID, codes)
		}
		for _, want := range []string{"500"} {
			if !slices.Contains(codes, want) {
				t.Errorf("%s does not list %s", op.ID, want)
			}
		}
		if !slices.Contains(storeless, op.ID) && !slices.Contains(codes, "503") {
			t.Errorf("%s touches the store but does not list 503", op.ID)
		}
		sec, hasSec := raw.(map[string]any)["security"].([]any)
		if (!hasSec || len(sec) > 0) && !slices.Contains(codes, "401") {
			t.Errorf("%s needs a token but does not list 401", op.ID)
		}
		rs := raw.(map[string]any)["responses"].(map[string]any)
		for _, c := range codes {
			if c[0] != '4' && c[0] != '5' {
				continue
			}
			ref, _ := rs[c].(map[string]any)["$ref"].(string)
			if !strings.HasPrefix(ref, "#/components/responses/") {
				t.Errorf("%s: the %s answer is not a shared response of components/responses", op.ID, c)
			}
		}
	}
}

// TestRefsResolve: every $ref of the document names something in it.
func TestRefsResolve(t *testing.T) {
	d := mustDoc(t)
	n := 0
	walk(d.Raw, "", func(ptr string, v any) {
		obj, ok := v.(map[string]any)
		if !ok {
			return
		}
		if ref, ok := obj["$ref"].(string); ok {
			n++
			if !strings.HasPrefix(ref, "#/") {
				t.Errorf("%s: $ref %q is not local", ptr, ref)
			} else if _, err := d.Lookup(ref[1:]); err != nil {
				t.Errorf("%s: $ref %q: %v", ptr, ref, err)
			}
		}
	})
	if n < 100 {
		t.Errorf("only %d $refs found", n)
	}
}

// TestSchemasCompile: every schema of components/schemas compiles, used or not.
func TestSchemasCompile(t *testing.T) {
	d := mustDoc(t)
	schemas := d.Raw["components"].(map[string]any)["schemas"].(map[string]any)
	for _, name := range sortedKeys(schemas) {
		if _, err := d.Schema("/components/schemas/" + escape(name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestExamplesValid: every example of a request or an answer is valid against its
// schema, so the examples cannot drift from the contract.
func TestExamplesValid(t *testing.T) {
	d := mustDoc(t)
	n := 0
	for _, op := range d.Operations() {
		raw, _ := d.Lookup(op.Pointer)
		var mediaPtrs []string // pointers of media type objects
		if rb, ok := raw.(map[string]any)["requestBody"]; ok {
			rbObj, ptr, err := d.resolve(rb, op.Pointer+"/requestBody")
			if err != nil {
				t.Fatal(err)
			}
			for mt := range rbObj["content"].(map[string]any) {
				mediaPtrs = append(mediaPtrs, ptr+"/content/"+escape(mt))
			}
		}
		rs := raw.(map[string]any)["responses"].(map[string]any)
		for _, code := range sortedKeys(rs) {
			r, ptr, err := d.resolve(rs[code], op.Pointer+"/responses/"+code)
			if err != nil {
				t.Fatal(err)
			}
			content, _ := r["content"].(map[string]any)
			for mt := range content {
				mediaPtrs = append(mediaPtrs, ptr+"/content/"+escape(mt))
			}
		}
		for _, mptr := range mediaPtrs {
			mv, _ := d.Lookup(mptr)
			m := mv.(map[string]any)
			var values []any
			if ex, ok := m["example"]; ok {
				values = append(values, ex)
			}
			if exs, ok := m["examples"].(map[string]any); ok {
				for _, name := range sortedKeys(exs) {
					exObj, _, err := d.resolve(exs[name], mptr+"/examples/"+escape(name))
					if err != nil {
						t.Fatal(err)
					}
					values = append(values, exObj["value"])
				}
			}
			for _, v := range values {
				n++
				var err error
				switch {
				case strings.HasSuffix(mptr, "text~1event-stream"):
					var md *media
					if md, err = d.eventsAt(mptr); err == nil {
						err = checkEvents(md.events, []byte(v.(string)))
					}
				case strings.HasSuffix(mptr, "application~1json"):
					var sch *jsonschema.Schema
					if sch, err = d.Schema(mptr + "/schema"); err == nil {
						err = sch.Validate(v)
					}
				}
				if err != nil {
					t.Errorf("%s: an example of %s is not valid: %v", op.ID, mptr, err)
				}
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d examples checked", n)
	}
}

// eventsAt compiles the x-events of a text/event-stream media type object.
func (s *Spec) eventsAt(ptr string) (*media, error) {
	v, err := s.Lookup(ptr)
	if err != nil {
		return nil, err
	}
	evs := v.(map[string]any)["x-events"].(map[string]any)
	md := &media{events: map[string]*jsonschema.Schema{}}
	for name := range evs {
		if md.events[name], err = s.Schema(ptr + "/x-events/" + escape(name)); err != nil {
			return nil, err
		}
	}
	return md, nil
}

const runningTask = `{"code":200,"message":"success","data":{"taskId":"UPID:pve1:0000B2C4:0001A3F1:6740A0B0:qmigrate:100:vmgate@pve!gw:",` +
	`"clusterId":1,"node":"pve1","type":"qmigrate","guestKind":"qemu","op":"migrate","isMigration":true,"vmid":100,"pveUser":"vmgate@pve!gw","startedBy":null,"status":"running",` +
	`"exitStatus":null,"result":"running","error":null,"startTime":"2026-11-22T10:00:00Z","endTime":null,"target":"pve2",` +
	`"progress":{"percent":42.1,"transferredBytes":1808939008,"totalBytes":4294967296,"bytesPerSecond":614924697,"phase":"memory","downtimeSeconds":null},` +
	`"followTaskId":null,"taskRef":17,"stale":false,"staleSince":null}}`

func check(t *testing.T, method, path string, status int, hdr http.Header, body string) error {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}}
	for k, v := range hdr {
		h[k] = v
	}
	return mustDoc(t).Check(httptest.NewRequest(method, path, nil), status, h, []byte(body))
}

// TestNulls: a running task's answer, with the nulls vmgate sends for what is not
// known yet, is valid; a null where the schema does not allow one is not.
func TestNulls(t *testing.T) {
	const path = "/api/v1/pve/task/UPID:pve1:0000B2C4:0001A3F1:6740A0B0:qmigrate:100:vmgate@pve!gw:"
	if err := check(t, "GET", path, 200, nil, runningTask); err != nil {
		t.Fatalf("a running task's answer: %v", err)
	}
	for _, bad := range []struct{ what, from, to string }{
		{"a null taskId", `"taskId":"UPID:pve1:0000B2C4:0001A3F1:6740A0B0:qmigrate:100:vmgate@pve!gw:"`, `"taskId":null`},
		{"a null status", `"status":"running"`, `"status":null`},
		{"a null startTime", `"startTime":"2026-11-22T10:00:00Z"`, `"startTime":null`},
		{"a null percent", `"percent":42.1`, `"percent":null`},
		{"an absent followTaskId", `,"followTaskId":null`, ``},
		{"a running task with an end", `"endTime":null`, `"endTime":"2026-11-22T10:01:00Z"`},
		{"a running task with result ok", `"result":"running"`, `"result":"ok"`},
		{"a stale task without staleSince", `"stale":false`, `"stale":true`},
		{"a pending task with a UPID", `"status":"running","exitStatus":null,"result":"running"`, `"status":"pending","exitStatus":null,"result":"unknown"`},
		{"an endTime that is no time", `"endTime":null`, `"endTime":"yesterday"`},
		{"an unknown field", `"node":"pve1"`, `"node":"pve1","secret":"x"`},
		{"a code that is not the status", `"code":200`, `"code":201`},
	} {
		body := strings.Replace(runningTask, bad.from, bad.to, 1)
		if body == runningTask {
			t.Fatalf("%s: the replacement did not apply", bad.what)
		}
		if err := check(t, "GET", path, 200, nil, body); err == nil {
			t.Errorf("%s passed", bad.what)
		}
	}
}

// TestCheckAnswers: what the checker accepts and refuses besides schemas.
func TestCheckAnswers(t *testing.T) {
	const badRequest = `{"code":400,"message":"node \"pve1/..\" is not a PVE node name","reason":"invalid_request"}`
	cases := []struct {
		what         string
		method, path string
		status       int
		hdr          http.Header
		body         string
		ok           bool
	}{
		// Routing is by escaped segments, as http.ServeMux does: %2F stays in the node.
		{"%2F inside a segment", "POST", "/api/v1/pve/vm/1/pve1%2F../100/start", 400, nil, badRequest, true},
		{"an unlisted status", "POST", "/api/v1/pve/vm/1/pve1/100/start", 418, nil, `{"code":418,"message":"x","reason":"teapot"}`, false},
		{"a reason the status does not have", "POST", "/api/v1/pve/vm/1/pve1/100/start", 400, nil, `{"code":400,"message":"x","reason":"vm_running"}`, false},
		{"an error detail the document does not name", "POST", "/api/v1/pve/vm/1/pve1/100/start", 400, nil, `{"code":400,"message":"x","reason":"invalid_request","hint":"y"}`, false},
		{"an unknown path answers 404", "GET", "/api/v1/nothing", 404, nil, `{"code":404,"message":"no such route","reason":"not_found"}`, true},
		{"an unknown path answers 200", "GET", "/api/v1/nothing", 200, nil, `{"code":200,"message":"success"}`, false},
		{"a wrong method answers 405", "DELETE", "/api/v1/user/me", 405, nil, `{"code":405,"message":"no","reason":"method_not_allowed"}`, true},
		{"a wrong method answers 404", "DELETE", "/api/v1/user/me", 404, nil, `{"code":404,"message":"no","reason":"not_found"}`, false},
		{"429 without Retry-After", "POST", "/api/v1/user/login", 429, nil, `{"code":429,"message":"slow down","reason":"rate_limited"}`, false},
		{"429 with Retry-After", "POST", "/api/v1/user/login", 429, http.Header{"Retry-After": {"3"}}, `{"code":429,"message":"slow down","reason":"rate_limited"}`, true},
		{"429 with Retry-After 0", "POST", "/api/v1/user/login", 429, http.Header{"Retry-After": {"0"}}, `{"code":429,"message":"slow down","reason":"rate_limited"}`, false},
		{"202 without Location", "POST", "/api/v1/pve/vm/1/pve1/100/start", 202, http.Header{"X-Task-Id": {"UPID:x"}}, `{"code":202,"message":"accepted"}`, false},
		{"202 with X-Task-Id and Location", "POST", "/api/v1/pve/vm/1/pve1/100/start", 202,
			http.Header{"X-Task-Id": {"UPID:x"}, "Location": {"/api/v1/pve/task/UPID:x"}}, `{"code":202,"message":"accepted"}`, true},
		{"a text answer where JSON is due", "GET", "/api/v1/user/me", 401, http.Header{"Content-Type": {"text/plain"}}, "no", false},
		{"two JSON values", "GET", "/api/v1/user/me", 401, nil, `{"code":401,"message":"no","reason":"unauthenticated"} {}`, false},
		{"an empty body", "GET", "/api/v1/user/me", 401, nil, ``, false},
	}
	for _, c := range cases {
		err := check(t, c.method, c.path, c.status, c.hdr, c.body)
		if (err == nil) != c.ok {
			t.Errorf("%s: ok=%v, got %v", c.what, c.ok, err)
		}
	}
}

// TestCheckEventStream: each event's data is checked against its event's schema.
func TestCheckEventStream(t *testing.T) {
	const path = "/api/v1/pve/task/UPID:pve1:0000B2C4:0001A3F1:6740A0B0:qmigrate:100:vmgate@pve!gw:/events"
	task := strings.TrimSuffix(strings.TrimPrefix(runningTask, `{"code":200,"message":"success","data":`), "}")
	sse := http.Header{"Content-Type": {"text/event-stream"}}
	for _, c := range []struct {
		what, body string
		ok         bool
	}{
		{"a running task, a ping and the end", "event: task\ndata: " + task + "\n\n: ping\n\nevent: end\ndata: {}\n\n", true},
		{"a task cut off by the end of the recording", "event: task\ndata: " + task + "\n\nevent: task\ndata: {\"ta", true},
		{"a task with a forbidden null", "event: task\ndata: " + strings.Replace(task, `"node":"pve1"`, `"node":null`, 1) + "\n\n", false},
		{"an event the document does not name", "event: progress\ndata: {}\n\n", false},
		{"an end with data", "event: end\ndata: {\"x\":1}\n\n", false},
		{"a task and a shutdown", "event: task\ndata: " + task + "\n\nevent: shutdown\nretry: 2000\ndata: {\"reason\":\"shutdown\",\"retryMs\":2000}\n\n", true},
	} {
		err := mustDoc(t).Check(httptest.NewRequest("GET", path, nil), 200, sse, []byte(c.body))
		if (err == nil) != c.ok {
			t.Errorf("%s: ok=%v, got %v", c.what, c.ok, err)
		}
	}
}

// TestCoverageCounts: a checked answer counts for its operation and status.
func TestCoverageCounts(t *testing.T) {
	if err := check(t, "GET", "/healthz", 200, nil, `{"code":200,"message":"success","data":{"status":"ok"}}`); err != nil {
		t.Fatal(err)
	}
	cov, err := Coverage()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(cov, func(c OperationCoverage) bool { return c.Operation.ID == "getHealth" })
	if i < 0 || cov[i].Seen[200] == 0 || !cov[i].Succeeded() {
		t.Fatalf("getHealth's 200 not counted: %+v", cov[i])
	}
	if err := CheckCoverage(); err == nil || !strings.Contains(err.Error(), "getMe") {
		t.Errorf("CheckCoverage with only getHealth exercised: %v", err)
	}
}

// BenchmarkCheckRunningTask is the cost apitest adds to one task answer.
func BenchmarkCheckRunningTask(b *testing.B) {
	d, err := Document()
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/api/v1/pve/task/UPID:pve1:0000B2C4:0001A3F1:6740A0B0:qmigrate:100:vmgate@pve!gw:", nil)
	h := http.Header{"Content-Type": {"application/json"}}
	body := []byte(runningTask)
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Check(r, 200, h, body); err != nil {
			b.Fatal(err)
		}
	}
}
