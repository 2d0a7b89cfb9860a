package pvesim

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// maxPost is pveproxy's limit on a request body.
const maxPost = 512 * 1024

// response is what a handler (or the pipeline) answers.
type response struct {
	status  int
	message string // the error message; the reason phrase is its first line
	data    any
	total   int
	errors  map[string]string
	empty   bool // no body at all (401 from auth, 595 from the proxy)
	plain   bool // the message as a plain-text body (errors outside handlers)
	// legacy: an error body as pve-http-server < 5.2.0 wrote it: JSON
	// without "message", and nothing for errors outside handlers.
	legacy bool
	// file is a download (task log with download=1), sent as text/plain.
	file     []byte
	fileName string
	// upgrade is where a vncwebsocket call's connection goes when it asks
	// for a WebSocket (consolews.go).
	upgrade *wsTarget
}

func success(data any) response { return response{status: http.StatusOK, data: data} }

// fail is a handler error: {"data":null,"message":msg}.
func fail(status int, msg string) response { return response{status: status, message: msg} }

// die is a Perl `die "msg\n"` in a handler: 500 with the message.
func die(msg string) response { return fail(http.StatusInternalServerError, msg+"\n") }

// paramFail is raise_param_exc: 400 with an errors map.
func paramFail(errs map[string]string) response {
	return response{status: http.StatusBadRequest, message: "Parameter verification failed.\n", errors: errs}
}

// request is one API call after routing and authentication.
type request struct {
	c      *Cluster
	route  *route
	local  string // the node whose endpoint received the request
	node   string // the node handling it (after proxying)
	who    principal
	params map[string]value
	now    time.Time
}

// param returns a parameter's text; it panics for a parameter the route does
// not declare, which keeps Routes() honest.
func (r *request) param(name string) (string, bool) {
	if !r.route.declares(name) {
		panic(fmt.Sprintf("pvesim: route %s %s reads undeclared parameter %q", r.route.method, r.route.path, name))
	}
	if !r.route.has(name) {
		return "", false // a parameter this release does not know
	}
	v, ok := r.params[name]
	if !ok || v.kind == nullValue {
		return "", false
	}
	return v.s, true
}

// flag is a boolean parameter (Perl truth of its value).
func (r *request) flag(name string) bool {
	s, _ := r.param(name)
	return s != "" && s != "0"
}

// integer is an integer parameter; ok is false when absent.
func (r *request) integer(name string) (int64, bool) {
	s, ok := r.param(name)
	if !ok {
		return 0, false
	}
	var v int64
	fmt.Sscan(strings.TrimPrefix(s, "+"), &v)
	return v, true
}

func (r *request) vmid() int {
	v, _ := r.integer("vmid")
	return int(v)
}

var formatRE = regexp.MustCompile(`^/api2/+([a-z][a-z0-9]+)(/.*)?$`)

// handler serves one node's endpoint.
func (c *Cluster) handler(local string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.serve(w, r, local)
	})
}

// serve runs PVE's pipeline: method → format → 401 → 501 → 400 (duplicate
// parameters) → 403 → proxy (500/595) → 400 (schema) → handler.
func (c *Cluster) serve(w http.ResponseWriter, r *http.Request, local string) {
	received := time.Now()
	if d := time.Duration(c.latency.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			// The client hung up (or said close_notify): pveproxy drops the
			// connection. Returning would make net/http answer 200 with an
			// empty body, which a client still reading could take for PVE's.
			t.Stop()
			hangUp(w)
			return
		}
	}
	c.mu.RLock()
	online := c.nodes[local].online
	c.mu.RUnlock()
	if !online {
		hangUp(w)
		return
	}
	if strings.HasPrefix(r.URL.Path, ControlPrefix) {
		c.serveControl(w, r)
		return
	}

	method := r.Method
	path := r.URL.Path // net/http has URI-unescaped it, as pveproxy does
	m := formatRE.FindStringSubmatch(path)
	relURI := "/"
	if m != nil && m[2] != "" {
		relURI = m[2]
	}
	rt, uri := matchRoute(c.rel.routes, method, relURI)
	pattern := "(unknown)"
	if rt != nil {
		pattern = rt.path
	}
	drop := c.countRequest(method, pattern)

	resp := c.pipeline(r, method, m, relURI, rt, uri, local)
	resp.legacy = resp.status >= 400 && !c.rel.errorBodies
	if drop {
		hangUp(w)
		return
	}
	if c.websocketUpgrade(w, r, &resp) {
		return
	}
	if resp.status == http.StatusUnauthorized && c.opts.AuthDelay > 0 {
		// pveproxy delays every 401 (handler 401s to 3 s after the request).
		delay := c.opts.AuthDelay
		if !resp.empty {
			delay -= time.Since(received)
		}
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				hangUp(w)
				return
			}
		}
	}
	writeResponse(w, r, resp, c.httpDate())
}

func (c *Cluster) pipeline(r *http.Request, method string, m []string, relURI string, rt *route, uri map[string]string, local string) response {
	if method != "GET" && method != "POST" && method != "PUT" && method != "DELETE" {
		return response{status: http.StatusNotImplemented, message: fmt.Sprintf("method '%s' not available", method), empty: true}
	}
	if m == nil {
		return response{status: http.StatusNotImplemented, message: "no such uri", plain: true}
	}
	format := m[1]
	now := c.clock.Now()

	var who principal
	needsAuth := !(relURI == "/access/ticket" && (method == "GET" || method == "POST"))
	apiToken := ""
	if extractAuthValue(r.Header.Get("Cookie"), "PVEAuthCookie") == "" && extractAuthValue(r.Header.Get("Authorization"), "PVEAuthCookie") == "" {
		apiToken = extractAuthValue(r.Header.Get("Authorization"), "PVEAPIToken")
	}
	if needsAuth {
		c.mu.RLock()
		p, reason := c.authenticate(method, r.Header.Get("Cookie"), r.Header.Get("Authorization"), r.Header.Get("CSRFPreventionToken"), now)
		c.mu.RUnlock()
		if reason != "" {
			return response{status: http.StatusUnauthorized, message: reason, empty: true}
		}
		who = p
	}

	if r.ContentLength > 0 && method != "POST" && method != "PUT" {
		return response{status: http.StatusNotImplemented, message: fmt.Sprintf("Unexpected content for method '%s'", method), plain: true}
	}
	if r.ContentLength > maxPost {
		return response{status: http.StatusNotImplemented, message: "for data too large", plain: true}
	}
	if format != "json" {
		return response{status: http.StatusNotImplemented, message: fmt.Sprintf("no formatter for uri %s, %s", relURI, format), plain: true}
	}
	params, perr := extractParams(r, method)
	if perr != "" {
		return response{status: http.StatusInternalServerError, message: perr, plain: true}
	}
	delete(params, "_dc") // ExtJS's cache buster

	if rt == nil {
		return fail(http.StatusNotImplemented, fmt.Sprintf("Method '%s %s' not implemented", method, relURI))
	}
	for k, v := range uri {
		if p, ok := params[k]; ok && (p.kind != scalarValue || p.s != v) {
			return paramFail(map[string]string{k: "duplicate parameter (already defined in URI) with conflicting values!"})
		}
		params[k] = value{s: v}
	}
	if apiToken != "" && !rt.allowToken {
		return fail(http.StatusForbidden, fmt.Sprintf("Permission check failed (URI '%s' not available with API token, need proper ticket.\n)\n", relURI))
	}
	if rt.permPath != "" && who.user != "" && !who.isRoot() {
		path := rt.permPath
		for k, v := range uri {
			path = strings.ReplaceAll(path, "{"+k+"}", v)
		}
		c.mu.RLock()
		allowed := c.hasPriv(who, path, rt.permPriv)
		c.mu.RUnlock()
		if !allowed {
			return fail(http.StatusForbidden, fmt.Sprintf("Permission check failed (%s, %s)\n", path, rt.permPriv))
		}
	}
	handling := local
	if rt.proxy {
		target := uri["node"]
		if target != local {
			c.mu.RLock()
			n, known := c.nodes[target]
			online := known && n.online
			c.mu.RUnlock()
			if !known {
				return die(fmt.Sprintf("hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known", target, target))
			}
			if !online {
				return response{status: 595, message: "No route to host", empty: true}
			}
			handling = target
		}
	}
	if errs := rt.schema.validate(params); errs != nil {
		return paramFail(errs)
	}
	return rt.handle(&request{c: c, route: rt, local: local, node: handling, who: who, params: params, now: c.clock.Now()})
}

// extractParams merges body and query parameters as pveproxy does: a JSON
// body when Content-Type says so, form encoding otherwise; the query wins.
// A non-empty string is the die text of a body that cannot be decoded.
func extractParams(r *http.Request, method string) (map[string]value, string) {
	params := map[string]value{}
	if method == "POST" || method == "PUT" {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxPost+1))
		if err != nil {
			return nil, "unable to read request body"
		}
		ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if ct == "application/json" {
			var msg string
			if params, msg = decodeJSONParams(body); msg != "" {
				return nil, msg
			}
		} else {
			decodeURLEncoded(string(body), params)
		}
	}
	query := map[string]value{}
	decodeURLEncoded(r.URL.RawQuery, query)
	for k, v := range query {
		params[k] = v
	}
	return params, ""
}

// nullValue is a parameter present without a value (Perl undef): it counts
// for "not defined in schema" but not as given.
const nullValue valueKind = -1

// decodeURLEncoded is pveproxy's decode_urlencoded (pve-http-server
// PVE/APIServer/AnyEvent.pm): pairs split on & and ;, a repeated key becomes
// an array, "a=b=c" keeps only "b". A pair is split with Perl's
// `split(/=/, $kv)`, which drops trailing empty fields, so "a=" (and "a==")
// leave the value undefined, exactly like a bare "a": the parameter is "not
// given" (a schema default applies, a required one is missing), while
// "a==b" keeps an empty string.
func decodeURLEncoded(data string, into map[string]value) {
	if data == "" {
		return
	}
	unescape := func(s string) string {
		s = strings.ReplaceAll(s, "+", " ")
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
				b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
				i += 2
				continue
			}
			b.WriteByte(s[i])
		}
		return b.String()
	}
	for _, kv := range strings.FieldsFunc(data, func(r rune) bool { return r == '&' || r == ';' }) {
		parts := strings.Split(kv, "=")
		for len(parts) > 1 && parts[len(parts)-1] == "" {
			parts = parts[:len(parts)-1]
		}
		k := unescape(parts[0])
		if len(parts) < 2 {
			into[k] = value{kind: nullValue}
			continue
		}
		v := unescape(parts[1])
		if old, ok := into[k]; ok && old.kind != nullValue {
			into[k] = value{kind: arrayValue}
			continue
		}
		into[k] = value{s: v}
	}
}

func isHex(b byte) bool {
	return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F')
}

func unhex(b byte) byte {
	switch {
	case b >= 'a':
		return b - 'a' + 10
	case b >= 'A':
		return b - 'A' + 10
	}
	return b - '0'
}

// decodeJSONParams decodes a JSON object body into parameters as Perl's
// decode_json would present them to the checker.
func decodeJSONParams(body []byte) (map[string]value, string) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil || dec.More() {
		return nil, "malformed JSON string, neither tag, array, object, number, string or atom, at character offset 0 (before \"" + perlSnippet(body) + "\") at /usr/share/perl5/PVE/APIServer/AnyEvent.pm line 934."
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, "Not a HASH reference at /usr/share/perl5/PVE/APIServer/AnyEvent.pm line 978."
	}
	params := map[string]value{}
	for k, v := range obj {
		switch x := v.(type) {
		case nil:
			params[k] = value{kind: nullValue}
		case bool:
			s := "0"
			if x {
				s = "1"
			}
			params[k] = value{kind: boolValue, s: s}
		case json.Number:
			params[k] = value{s: perlNumber(x)}
		case string:
			params[k] = value{s: x}
		case []any:
			params[k] = value{kind: arrayValue}
		default:
			params[k] = value{kind: objectValue}
		}
	}
	return params, ""
}

func perlSnippet(b []byte) string {
	s := string(b)
	if len(s) > 10 {
		s = s[:10]
	}
	return strings.ReplaceAll(s, "\n", `\n`)
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	conn.Close()
}

// writeResponse renders an answer as pveproxy does. Successes go through the
// ResponseWriter (reason "OK", keep-alive). Errors need their own reason
// phrase, which net/http cannot write, so they are written raw on the
// hijacked connection, which is then closed — pveproxy closes after every
// error too.
func writeResponse(w http.ResponseWriter, r *http.Request, resp response, date string) {
	var body []byte
	contentType := ""
	download := resp.file != nil
	switch {
	case resp.empty, resp.plain && resp.legacy:
	case resp.plain:
		body = []byte(resp.message)
	case download:
		body, contentType = resp.file, "text/plain"
	default:
		contentType = "application/json;charset=UTF-8"
		body = encodeBody(resp)
	}
	// pveproxy compresses bodies over 1 KiB for clients that accept it;
	// downloads of large task logs are always gzip-compressed.
	gz := len(body) > 1024 && (download || strings.Contains(r.Header.Get("Accept-Encoding"), "gzip"))
	if gz {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		zw.Write(body)
		zw.Close()
		body = buf.Bytes()
	}
	if resp.status == http.StatusOK {
		h := w.Header()
		h["Cache-Control"] = []string{"max-age=0"}
		if h.Get("Connection") == "" { // "close" from the keep-alive limit stays
			h["Connection"] = []string{"Keep-Alive"}
		}
		h["Date"] = []string{date}
		h["Pragma"] = []string{"no-cache"}
		h["Server"] = []string{"pve-api-daemon/3.0"}
		if gz {
			h["Content-Encoding"] = []string{"gzip"}
		}
		h["Content-Length"] = []string{fmt.Sprint(len(body))}
		h["Content-Type"] = []string{contentType}
		if download {
			h["Content-Disposition"] = []string{`attachment; filename="` + resp.fileName + `"`}
		}
		h["Expires"] = []string{date}
		w.WriteHeader(http.StatusOK)
		if r.Method != "HEAD" {
			w.Write(body)
		}
		return
	}
	reason, _, _ := strings.Cut(resp.message, "\n")
	reason = strings.TrimRight(reason, "\r")
	if reason == "" {
		reason = http.StatusText(resp.status)
	}
	// Read what is left of the body first: closing a connection with unread
	// data makes the kernel reset it, and the client might lose the answer.
	io.Copy(io.Discard, io.LimitReader(r.Body, maxPost+1))
	hj, isHJ := w.(http.Hijacker)
	if !isHJ {
		w.WriteHeader(resp.status)
		w.Write(body)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	proto := r.Proto
	if proto != "HTTP/1.0" {
		proto = "HTTP/1.1"
	}
	bw := bufio.NewWriter(conn)
	_ = rw
	fmt.Fprintf(bw, "%s %d %s\r\n", proto, resp.status, reason)
	fmt.Fprintf(bw, "Cache-Control: max-age=0\r\nConnection: close\r\nDate: %s\r\nPragma: no-cache\r\nServer: pve-api-daemon/3.0\r\n", date)
	if gz {
		fmt.Fprintf(bw, "Content-Encoding: gzip\r\n")
	}
	if len(body) > 0 {
		fmt.Fprintf(bw, "Content-Length: %d\r\n", len(body))
	}
	if contentType != "" {
		fmt.Fprintf(bw, "Content-Type: %s\r\n", contentType)
	}
	fmt.Fprintf(bw, "Expires: %s\r\n\r\n", date)
	bw.Write(body)
	bw.Flush()
}

// encodeBody is the JSON formatter: data, errors, message (pve-http-server ≥
// 5.2.0, PVE ≥ 8.4 here), total.
func encodeBody(resp response) []byte {
	var buf bytes.Buffer
	buf.WriteString(`{"data":`)
	if resp.status == http.StatusOK {
		buf.Write(marshal(resp.data))
	} else {
		buf.WriteString("null")
	}
	if len(resp.errors) > 0 {
		buf.WriteString(`,"errors":`)
		buf.Write(marshal(resp.errors))
	}
	if resp.status >= 400 && !resp.legacy {
		msg := resp.message
		if msg == "" {
			msg = http.StatusText(resp.status)
		}
		buf.WriteString(`,"message":`)
		buf.Write(marshal(msg))
	}
	if resp.status == http.StatusOK && len(resp.errors) == 0 && resp.total > 0 {
		fmt.Fprintf(&buf, `,"total":%d`, resp.total)
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// marshal encodes like Perl's JSON: no HTML escaping.
func marshal(v any) []byte {
	if a, ok := v.(jsonAppender); ok {
		return a.appendJSON(make([]byte, 0, 4096))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte("null")
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
