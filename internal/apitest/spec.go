package apitest

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/vmgate/vmgate/api"
)

// statusKey is what the keys of an OpenAPI Responses Object may be.
var statusKey = regexp.MustCompile(`^([1-5][0-9][0-9]|[1-5]XX|default)$`)

// docURL names the document for the schema compiler; schemas are compiled at JSON
// pointers into it, so their $refs ("#/components/schemas/...") resolve in it.
const docURL = "urn:vmgate:api:openapi.json"

// dialect2020 is the only JSON Schema dialect the document may use.
const dialect2020 = "https://json-schema.org/draft/2020-12/schema"

// Spec is api/openapi.yaml compiled for checking answers: every operation with its
// responses, each response's media types with their schemas compiled by a JSON
// Schema 2020-12 validator (as OpenAPI 3.1 requires), and its headers.
type Spec struct {
	// Raw is the document as JSON data (objects are map[string]any, numbers
	// json.Number), for the tests that check the document itself.
	Raw map[string]any

	ops       []*Operation
	templates [][]string // the segments of every path, for telling 404 from 405
	errSchema *jsonschema.Schema
	compiler  *jsonschema.Compiler
}

// Operation is one method on one path of the document.
type Operation struct {
	ID     string // operationId
	Method string // upper case
	Path   string // the path template, e.g. /api/v1/users/{id}
	// Pointer is the operation's JSON pointer in the document.
	Pointer string

	segs      []string
	responses map[string]*response // by status code ("200"), range ("4XX") or "default"
	// refusesOnly: the document lists no 2xx answer (an action vmgate refuses by
	// design, such as a container's suspend).
	refusesOnly bool
}

// Key is "METHOD /path/template", as the route table writes a route.
func (o *Operation) Key() string { return o.Method + " " + o.Path }

type response struct {
	content map[string]*media // by media type
	headers map[string]*header
}

type media struct {
	schema *jsonschema.Schema            // nil for text bodies that are not checked
	events map[string]*jsonschema.Schema // text/event-stream: event name → schema of its data
}

type header struct {
	required bool
	integer  bool // the value is a decimal integer, checked as a number
	schema   *jsonschema.Schema
}

var (
	loadOnce sync.Once
	spec     *Spec
	loadErr  error
)

// Document loads and compiles api/openapi.yaml once per test binary.
func Document() (*Spec, error) {
	loadOnce.Do(func() {
		spec, loadErr = Load(api.OpenAPIYAML)
		if loadErr != nil {
			loadErr = fmt.Errorf("api/openapi.yaml: %w", loadErr)
		}
	})
	return spec, loadErr
}

// Load compiles an OpenAPI 3.1 document given as YAML.
func Load(yamlDoc []byte) (*Spec, error) {
	js, err := api.YAMLToJSON(yamlDoc)
	if err != nil {
		return nil, err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		return nil, err
	}
	raw, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("the document is not an object")
	}
	if o, _ := raw["openapi"].(string); !strings.HasPrefix(o, "3.1.") {
		return nil, fmt.Errorf("openapi is %q, want 3.1.x", o)
	}
	if d, _ := raw["jsonSchemaDialect"].(string); d != dialect2020 {
		return nil, fmt.Errorf("jsonSchemaDialect is %q, want %s", d, dialect2020)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat() // date-time fields must hold real times
	if err := c.AddResource(docURL, raw); err != nil {
		return nil, err
	}
	s := &Spec{Raw: raw, compiler: c}
	if s.errSchema, err = s.Schema("/components/schemas/Error"); err != nil {
		return nil, err
	}
	paths, _ := raw["paths"].(map[string]any)
	if len(paths) == 0 {
		return nil, errors.New("no paths")
	}
	for _, path := range sortedKeys(paths) {
		item, _ := paths[path].(map[string]any)
		s.templates = append(s.templates, segments(path))
		for _, m := range []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"} {
			opRaw, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			ptr := "/paths/" + escape(path) + "/" + m
			op, err := s.operation(opRaw, ptr)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", strings.ToUpper(m), path, err)
			}
			op.Method, op.Path, op.segs = strings.ToUpper(m), path, segments(path)
			s.ops = append(s.ops, op)
		}
	}
	return s, nil
}

// Operations lists the document's operations, by path and then method.
func (s *Spec) Operations() []*Operation { return s.ops }

// Schema compiles the schema at a JSON pointer into the document.
func (s *Spec) Schema(ptr string) (*jsonschema.Schema, error) {
	return s.compiler.Compile(docURL + "#" + (&url.URL{Fragment: ptr}).EscapedFragment())
}

func (s *Spec) operation(raw map[string]any, ptr string) (*Operation, error) {
	op := &Operation{Pointer: ptr, responses: map[string]*response{}}
	op.ID, _ = raw["operationId"].(string)
	rs, _ := raw["responses"].(map[string]any)
	if len(rs) == 0 {
		return nil, errors.New("no responses")
	}
	for code := range rs {
		if !statusKey.MatchString(code) {
			return nil, fmt.Errorf("responses: %q is not a status code, a range (4XX) or default", code)
		}
		rraw, rptr, err := s.resolve(rs[code], ptr+"/responses/"+escape(code))
		if err != nil {
			return nil, fmt.Errorf("response %s: %w", code, err)
		}
		r, err := s.response(rraw, rptr)
		if err != nil {
			return nil, fmt.Errorf("response %s: %w", code, err)
		}
		op.responses[code] = r
	}
	op.refusesOnly = true
	for code := range op.responses {
		if code[0] == '2' {
			op.refusesOnly = false
		}
	}
	return op, nil
}

func (s *Spec) response(raw map[string]any, ptr string) (*response, error) {
	r := &response{content: map[string]*media{}, headers: map[string]*header{}}
	content, _ := raw["content"].(map[string]any)
	for mt, m := range content {
		mraw, _ := m.(map[string]any)
		mptr := ptr + "/content/" + escape(mt)
		md := &media{}
		if _, ok := mraw["schema"]; ok && isJSON(mt) {
			sch, err := s.Schema(mptr + "/schema")
			if err != nil {
				return nil, err
			}
			md.schema = sch
		}
		if evs, ok := mraw["x-events"].(map[string]any); ok {
			md.events = map[string]*jsonschema.Schema{}
			for name := range evs {
				sch, err := s.Schema(mptr + "/x-events/" + escape(name))
				if err != nil {
					return nil, err
				}
				md.events[name] = sch
			}
		}
		r.content[mt] = md
	}
	hs, _ := raw["headers"].(map[string]any)
	for name, h := range hs {
		hraw, hptr, err := s.resolve(h, ptr+"/headers/"+escape(name))
		if err != nil {
			return nil, fmt.Errorf("header %s: %w", name, err)
		}
		hd := &header{}
		hd.required, _ = hraw["required"].(bool)
		if sraw, ok := hraw["schema"].(map[string]any); ok {
			hd.integer = sraw["type"] == "integer"
			if hd.schema, err = s.Schema(hptr + "/schema"); err != nil {
				return nil, err
			}
		}
		r.headers[http.CanonicalHeaderKey(name)] = hd
	}
	return r, nil
}

// resolve follows a Reference Object ($ref to a local JSON pointer) to the object it
// names and returns it with its pointer.
func (s *Spec) resolve(v any, ptr string) (map[string]any, string, error) {
	for range 10 {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, "", fmt.Errorf("%s is not an object", ptr)
		}
		ref, ok := obj["$ref"].(string)
		if !ok {
			return obj, ptr, nil
		}
		if !strings.HasPrefix(ref, "#/") {
			return nil, "", fmt.Errorf("%s: only local references are supported, not %q", ptr, ref)
		}
		ptr = ref[1:]
		var err error
		if v, err = s.Lookup(ptr); err != nil {
			return nil, "", err
		}
	}
	return nil, "", fmt.Errorf("%s: references nested too deep", ptr)
}

// Lookup returns the value at a JSON pointer into the document.
func (s *Spec) Lookup(ptr string) (any, error) {
	var v any = s.Raw
	if ptr == "" {
		return v, nil
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, fmt.Errorf("%q is not a JSON pointer", ptr)
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[tok]; !ok {
				return nil, fmt.Errorf("%s: no %q", ptr, tok)
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("%s: no item %q", ptr, tok)
			}
			v = c[i]
		default:
			return nil, fmt.Errorf("%s: %q is inside a scalar", ptr, tok)
		}
	}
	return v, nil
}

// find matches a request path to an operation the way http.ServeMux does: by the
// escaped path's segments, each unescaped on its own (so %2F stays inside one
// segment), a literal segment preferred to a parameter. known reports whether some
// path of the document matched, whatever the method.
func (s *Spec) find(method, escapedPath string) (op *Operation, known bool) {
	segs := segments(escapedPath)
	for i, seg := range segs {
		if u, err := url.PathUnescape(seg); err == nil {
			segs[i] = u
		}
	}
	best := -1
	for _, o := range s.ops {
		lits, ok := match(o.segs, segs)
		if !ok {
			continue
		}
		known = true
		if o.Method == method && lits > best {
			op, best = o, lits
		}
	}
	if !known {
		for _, t := range s.templates {
			if _, ok := match(t, segs); ok {
				known = true
			}
		}
	}
	return op, known
}

// match reports whether a request's segments fit a template's, and how many of the
// template's segments are literal.
func match(tmpl, segs []string) (int, bool) {
	if len(tmpl) != len(segs) {
		return 0, false
	}
	lits := 0
	for i, t := range tmpl {
		if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
			if segs[i] == "" {
				return 0, false
			}
			continue
		}
		if t != segs[i] {
			return 0, false
		}
		lits++
	}
	return lits, true
}

// Check validates one answer to r against the document: the status must be one the
// operation lists, the content type one the response lists, the body valid against
// its schema (each event of an event stream against the schema of its event), the
// envelope's code equal to the status, and the headers the response requires
// present and valid. A path the document does not have must answer 404, a method a
// documented path does not serve 405, both with the error envelope. HEAD requests
// are not checked (they have no body). A checked answer counts for Coverage.
func (s *Spec) Check(r *http.Request, status int, h http.Header, body []byte) error {
	if r.Method == http.MethodHead {
		return nil
	}
	op, known := s.find(r.Method, r.URL.EscapedPath())
	if op == nil {
		want := http.StatusNotFound
		if known {
			want = http.StatusMethodNotAllowed
		}
		if status != want {
			return fmt.Errorf("no operation of the document serves %s %s; the answer must be %d, not %d", r.Method, r.URL.Path, want, status)
		}
		return s.checkJSON(s.errSchema, status, body)
	}
	code := strconv.Itoa(status)
	resp := op.responses[code]
	if resp == nil {
		resp = op.responses[code[:1]+"XX"]
	}
	if resp == nil {
		resp = op.responses["default"]
	}
	if resp == nil {
		return fmt.Errorf("%s (%s) does not list status %d; the body: %s", op.ID, op.Key(), status, excerpt(body))
	}
	var errList []error
	for name, hd := range resp.headers {
		if err := hd.check(name, h.Values(name)); err != nil {
			errList = append(errList, err)
		}
	}
	if len(resp.content) > 0 {
		if err := checkContent(resp, status, h, body, s); err != nil {
			errList = append(errList, err)
		}
	} else if len(body) > 0 {
		errList = append(errList, fmt.Errorf("status %d has no content in the document, but the answer has a body", status))
	}
	if err := errors.Join(errList...); err != nil {
		return fmt.Errorf("%s (%s): %w", op.ID, op.Key(), err)
	}
	record(op, status)
	return nil
}

func checkContent(resp *response, status int, h http.Header, body []byte, s *Spec) error {
	ct := h.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("content type %q: %v", ct, err)
	}
	md := resp.content[mt]
	if md == nil {
		return fmt.Errorf("content type %s is not one of %v", mt, sortedKeys(resp.content))
	}
	switch {
	case md.events != nil:
		return checkEvents(md.events, body)
	case md.schema != nil:
		return s.checkJSON(md.schema, status, body)
	}
	return nil
}

// checkJSON validates a JSON body against sch; an envelope's code must equal the status.
func (s *Spec) checkJSON(sch *jsonschema.Schema, status int, body []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("the body is not one JSON value (%v): %s", err, excerpt(body))
	}
	if obj, ok := v.(map[string]any); ok {
		if c, ok := obj["code"]; ok && fmt.Sprint(c) != strconv.Itoa(status) {
			return fmt.Errorf("the envelope's code %v is not the status %d", c, status)
		}
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%v\nbody: %s", err, excerpt(body))
	}
	return nil
}

// checkEvents validates a server-sent event stream: every event must be one the
// document names, its data valid against that event's schema. Comments are skipped;
// a last event cut off by the end of the recording is not checked.
func checkEvents(events map[string]*jsonschema.Schema, body []byte) error {
	var errList []error
	blocks := strings.Split(strings.ReplaceAll(string(body), "\r\n", "\n"), "\n\n")
	if !strings.HasSuffix(string(body), "\n\n") {
		blocks = blocks[:len(blocks)-1] // incomplete
	}
	for _, block := range blocks {
		name, data, hasData := "message", "", false
		for _, line := range strings.Split(block, "\n") {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "": // a comment, or an empty line
			case "event":
				name = value
			case "data":
				if hasData {
					data += "\n"
				}
				data, hasData = data+value, true
			case "id", "retry":
			default:
				errList = append(errList, fmt.Errorf("event stream: unknown field %q", field))
			}
		}
		if !hasData {
			continue
		}
		sch := events[name]
		if sch == nil {
			errList = append(errList, fmt.Errorf("event %q is not one the document names", name))
			continue
		}
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(data))
		if err == nil {
			err = sch.Validate(v)
		}
		if err != nil {
			errList = append(errList, fmt.Errorf("event %q: %v\ndata: %s", name, err, excerpt([]byte(data))))
		}
	}
	return errors.Join(errList...)
}

func (hd *header) check(name string, values []string) error {
	if len(values) == 0 {
		if hd.required {
			return fmt.Errorf("header %s is required", name)
		}
		return nil
	}
	if hd.schema == nil {
		return nil
	}
	if len(values) > 1 {
		return fmt.Errorf("header %s is given %d times", name, len(values))
	}
	var v any = values[0]
	if hd.integer {
		n, err := strconv.ParseInt(values[0], 10, 64)
		if err != nil {
			return fmt.Errorf("header %s: %q is not an integer", name, values[0])
		}
		v = n
	}
	if err := hd.schema.Validate(v); err != nil {
		return fmt.Errorf("header %s: %v", name, err)
	}
	return nil
}

func isJSON(mt string) bool { return mt == "application/json" || strings.HasSuffix(mt, "+json") }

// escape escapes a JSON pointer token.
func escape(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

func segments(path string) []string { return strings.Split(strings.TrimPrefix(path, "/"), "/") }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func excerpt(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}
