package pvesim

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

const (
	testTokenID = "vmgate@pve!gw"
	testSecret  = "6f1c0c43-8a3e-4d6b-9d2f-0c2b1f6a7e11"
)

// testStart is the emulated start of every manual-clock test cluster.
var testStart = time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)

// env is a served test cluster and a client for it.
type env struct {
	t      *testing.T
	c      *Cluster
	srv    *Server
	eps    map[string]Endpoint
	client *http.Client
	auth   string // Authorization header value
}

type envOptions struct {
	opts  Options
	serve ServeOptions
	nodes []NodeSpec // default: pve1, pve2, pve3
	build func(c *Cluster)
}

// newEnv builds a three-node cluster on a manual clock (unless the options
// say otherwise), serves it on plain HTTP, and authenticates with a token.
func newEnv(t *testing.T, eo envOptions) *env {
	t.Helper()
	if eo.opts.Speed == 0 {
		eo.opts.ManualClock = true
	}
	if eo.opts.Start.IsZero() {
		eo.opts.Start = testStart
	}
	c := New(eo.opts)
	if eo.nodes == nil {
		eo.nodes = []NodeSpec{{Name: "pve1"}, {Name: "pve2"}, {Name: "pve3"}}
	}
	for _, n := range eo.nodes {
		if err := c.AddNode(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.AddToken(testTokenID, testSecret, TokenOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.AddUser("root@pam", "rootpw"); err != nil {
		t.Fatal(err)
	}
	if eo.build != nil {
		eo.build(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := c.Serve(ctx, eo.serve)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true},
		MaxIdleConnsPerHost: 64,
	}
	e := &env{t: t, c: c, srv: srv, eps: map[string]Endpoint{}, client: &http.Client{Transport: tr, Timeout: 20 * time.Second},
		auth: "PVEAPIToken=" + testTokenID + "=" + testSecret}
	for _, ep := range srv.Endpoints() {
		e.eps[ep.Node] = ep
	}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		cancel()
	})
	return e
}

func addVM(t *testing.T, c *Cluster, spec VMSpec) {
	t.Helper()
	if err := c.AddVM(spec); err != nil {
		t.Fatal(err)
	}
}

// result is one answer, decoded.
type result struct {
	status  int
	line    string // resp.Status: "401 No ticket"
	header  http.Header
	close   bool // the answer closes the connection (net/http drops "Connection: close" from header)
	body    []byte
	data    json.RawMessage
	message string
	errors  map[string]string
	total   *int
}

type call struct {
	node    string // whose endpoint to call (default pve1)
	method  string
	path    string // below /api2/json
	form    url.Values
	query   url.Values
	json    any
	headers map[string]string
	noAuth  bool
}

func (e *env) do(c call) result {
	e.t.Helper()
	r, err := e.try(c)
	if err != nil {
		e.t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	return r
}

func (e *env) try(c call) (result, error) {
	if c.node == "" {
		c.node = "pve1"
	}
	if c.method == "" {
		c.method = "GET"
	}
	u := e.eps[c.node].URL + "/api2/json" + c.path
	if c.query != nil {
		u += "?" + c.query.Encode()
	}
	var body io.Reader
	ct := ""
	switch {
	case c.json != nil:
		b, _ := json.Marshal(c.json)
		body, ct = strings.NewReader(string(b)), "application/json"
	case c.form != nil:
		body, ct = strings.NewReader(c.form.Encode()), "application/x-www-form-urlencoded"
	}
	req, err := http.NewRequest(c.method, u, body)
	if err != nil {
		return result{}, err
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if !c.noAuth {
		req.Header.Set("Authorization", e.auth)
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return result{}, err
	}
	res := result{status: resp.StatusCode, line: resp.Status, header: resp.Header, close: resp.Close, body: b}
	if len(b) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		var env struct {
			Data    json.RawMessage   `json:"data"`
			Message string            `json:"message"`
			Errors  map[string]string `json:"errors"`
			Total   *int              `json:"total"`
		}
		if err := json.Unmarshal(b, &env); err != nil {
			return res, fmt.Errorf("decode %q: %w", b, err)
		}
		res.data, res.message, res.errors, res.total = env.Data, env.Message, env.Errors, env.Total
	}
	return res, nil
}

// upid posts and returns the UPID of the task started.
func (e *env) post(node, path string, form url.Values) string {
	e.t.Helper()
	r := e.do(call{node: node, method: "POST", path: path, form: form})
	if r.status != 200 {
		e.t.Fatalf("POST %s: %s %s", path, r.line, r.body)
	}
	var upid string
	if err := json.Unmarshal(r.data, &upid); err != nil {
		e.t.Fatalf("POST %s: data %s: %v", path, r.data, err)
	}
	return upid
}

// task returns a task's state straight from the cluster.
func (e *env) task(upid string) TaskState {
	e.t.Helper()
	ts, ok := e.c.Task(upid)
	if !ok {
		e.t.Fatalf("no task %s", upid)
	}
	return ts
}

// wait waits for a task in real time (for clusters on a running clock).
func (e *env) wait(upid string) TaskState {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ts, err := e.c.WaitTask(ctx, upid)
	if err != nil {
		e.t.Fatal(err)
	}
	return ts
}

// statusOf reads a task's status over HTTP at its node.
func (e *env) statusOf(upid string) map[string]any {
	e.t.Helper()
	info, ok := decodeUPID(upid)
	if !ok {
		e.t.Fatalf("bad upid %s", upid)
	}
	r := e.do(call{node: info.node, path: "/nodes/" + info.node + "/tasks/" + url.PathEscape(upid) + "/status"})
	if r.status != 200 {
		e.t.Fatalf("task status: %s %s", r.line, r.body)
	}
	var st map[string]any
	if err := json.Unmarshal(r.data, &st); err != nil {
		e.t.Fatal(err)
	}
	return st
}

// logOf reads a whole task log over HTTP.
func (e *env) logOf(upid string) []string {
	e.t.Helper()
	info, _ := decodeUPID(upid)
	r := e.do(call{node: info.node, path: "/nodes/" + info.node + "/tasks/" + url.PathEscape(upid) + "/log", query: url.Values{"limit": {"0"}}})
	if r.status != 200 {
		e.t.Fatalf("task log: %s %s", r.line, r.body)
	}
	var lines []struct {
		N int    `json:"n"`
		T string `json:"t"`
	}
	if err := json.Unmarshal(r.data, &lines); err != nil {
		e.t.Fatal(err)
	}
	var res []string
	for i, l := range lines {
		if l.N != i+1 {
			e.t.Fatalf("log line %d numbered %d", i+1, l.N)
		}
		res = append(res, l.T)
	}
	return res
}

func decodeData[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.data, &v); err != nil {
		t.Fatalf("decode %s: %v", r.data, err)
	}
	return v
}

func wantLine(t *testing.T, r result, status int, line string) {
	t.Helper()
	if r.status != status || r.line != line {
		t.Fatalf("got %q (body %q), want %q", r.line, r.body, line)
	}
}

func vmPath(node string, vmid int, rest string) string {
	return fmt.Sprintf("/nodes/%s/qemu/%d%s", node, vmid, rest)
}
