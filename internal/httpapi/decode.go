package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/errs"
)

// maxBody is the largest request body vmgate reads (docs/design.md §3).
const maxBody = 64 << 10

// decodeJSON reads exactly one JSON object into dst, strictly: at most maxBody bytes,
// no unknown fields, no wrong types, nothing after the object, and (checkKeys) no
// key given twice or matching a field only when case is ignored, at any depth. The
// Content-Type was checked before the handler ran (requireJSON).
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return bodyError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return bodyError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errs.E(errs.Invalid, "the body must hold exactly one JSON object")
	}
	return checkKeys(body, reflect.TypeOf(dst))
}

// requireJSON refuses a POST, PUT or PATCH whose body is not declared as JSON
// (docs/security.md item 31): Content-Type must be application/json, with at most a charset
// parameter of utf-8. A request without a body needs no Content-Type. Refusing
// other types closes the door on bodies a browser may send across origins without
// a preflight (text/plain, form encodings).
func requireJSON(r *http.Request) error {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return nil
	}
	if r.ContentLength == 0 {
		return nil
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	ok := err == nil && mt == "application/json"
	for k, v := range params {
		ok = ok && k == "charset" && strings.EqualFold(v, "utf-8")
	}
	if !ok {
		return errs.E(errs.UnsupportedMedia,
			"the body must be JSON, sent with Content-Type: application/json")
	}
	return nil
}

// requireNoBody rejects a request that carries a body where none is expected.
func requireNoBody(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(err)
	}
	// An empty body or an empty JSON object is harmless; anything else is a mistake
	// (perhaps a parameter meant for the query string) worth saying.
	if t := strings.TrimSpace(string(b)); t != "" && t != "{}" {
		return errs.E(errs.Invalid, "this request takes no body")
	}
	return nil
}

func bodyError(err error) error {
	var tooLarge *http.MaxBytesError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooLarge):
		return errs.E(errs.TooLarge, "the body is larger than %d bytes", maxBody)
	case errors.Is(err, io.EOF):
		return errs.E(errs.Invalid, "the body is empty; a JSON object is required")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return errs.E(errs.Invalid, "the body is not valid JSON")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return errs.E(errs.Invalid, "the body must be a JSON object")
		}
		return errs.E(errs.Invalid, "field %q must be of type %s", field, jsonType(typ.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return errs.E(errs.Invalid, "unknown field %s", name)
	default:
		return errs.E(errs.Invalid, "the body could not be read: %s", safeText(err.Error()))
	}
}

func jsonType(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "int", "int64", "int32", "uint", "uint64", "uint32", "float64":
		return "number"
	case "slice":
		return "array"
	default:
		return "object"
	}
}

// safeText trims text that came from outside before it is echoed in a message.
func safeText(s string) string {
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return strconv.Quote(s)[1 : len(strconv.Quote(s))-1]
}

// parseBool reads a query flag the way docs/design.md §3.2 allows: true/false/1/0.
func parseBool(name, v string, def bool) (bool, error) {
	switch v {
	case "":
		return def, nil
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, errs.E(errs.Invalid, "%s must be true, false, 1 or 0, not %q", name, safeText(v))
}

// parseIntParam reads an integer query or path value within [min, max].
func parseIntParam(name, v string, min, max int64) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < min || n > max || strings.HasPrefix(v, "+") {
		return 0, errs.E(errs.Invalid, "%s must be an integer from %d to %d, not %q", name, min, max, safeText(v))
	}
	return n, nil
}

// queryInt reads an optional integer query parameter.
func queryInt(r *http.Request, name string, def, min, max int64) (int64, error) {
	vs, ok := query(r)[name]
	if !ok {
		return def, nil
	}
	if len(vs) != 1 {
		return 0, errs.E(errs.Invalid, "%s given more than once", name)
	}
	return parseIntParam(name, vs[0], min, max)
}

// checkQuery rejects query parameters the route does not know.
func checkQuery(r *http.Request, allowed ...string) error {
	for k := range query(r) {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			return errs.E(errs.Invalid, "unknown query parameter %q", safeText(k))
		}
	}
	return nil
}
