package httpapi

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/vmgate/vmgate/internal/errs"
)

// encoding/json accepts two things a strict API must refuse (docs/security.md item 31):
// an object that gives one key twice (the last value wins, so two readers of the
// same body can disagree on what it says), and a key that names a field only when
// case is ignored ("EMAIL" fills Email). DisallowUnknownFields catches neither. So
// every body is first walked token by token (json.Decoder.Token), with the type it
// is decoded into alongside: each object's keys are tracked, at every depth, and
// a key of an object bound to a struct must be one of its JSON field names exactly.
// See docs/decisions for why a pre-scan and not another decoder.

// checkKeys walks body, one JSON value, against t (the type it is decoded into)
// and refuses duplicate keys and case-variant field names at every depth. Syntax
// errors are left to the decoder, which words them better; checkKeys reports them
// as nil.
func checkKeys(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	err := scanValue(dec, t, "")
	var ke *keyError
	if errors.As(err, &ke) {
		return errs.E(errs.Invalid, "%s", ke.msg)
	}
	return nil
}

// keyError is a key checkKeys refuses; other errors of the scan are syntax errors.
type keyError struct{ msg string }

func (e *keyError) Error() string { return e.msg }

// scanValue reads one value. t is the Go type it lands in; nil means "any shape"
// (interface{}, a type with its own UnmarshalJSON, or no field at all): only
// duplicate keys are checked below it.
func scanValue(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	t = shape(t)
	switch d {
	case '{':
		return scanObject(dec, t, path)
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := scanValue(dec, elem, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ]
		return err
	}
	return errors.New("unexpected delimiter")
}

func scanObject(dec *json.Decoder, t reflect.Type, path string) error {
	var fields *structFields
	if t != nil && t.Kind() == reflect.Struct {
		fields = fieldsOf(t)
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return errors.New("object key is not a string")
		}
		name := path + "." + key
		if path == "" {
			name = key
		}
		if seen[key] {
			return &keyError{msg: "field " + quoteKey(name) + " is given more than once"}
		}
		seen[key] = true
		var elem reflect.Type
		switch {
		case fields != nil:
			ft, exact := fields.byName[key]
			if !exact {
				for n := range fields.byName {
					if strings.EqualFold(n, key) {
						return &keyError{msg: "unknown field " + quoteKey(name) + "; field names are case-sensitive: did you mean " +
							quoteKey(n) + "?"}
					}
				}
			}
			elem = ft // nil for an unknown field: the decoder refuses it
		case t != nil && t.Kind() == reflect.Map:
			elem = t.Elem()
		}
		if err := scanValue(dec, elem, name); err != nil {
			return err
		}
	}
	_, err := dec.Token() // }
	return err
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// shape returns t without pointers, or nil when encoding/json does not decode into
// it field by field: an interface, or a type that unmarshals itself.
func shape(t reflect.Type) reflect.Type {
	for t != nil {
		if t.Implements(jsonUnmarshaler) || t.Implements(textUnmarshaler) ||
			reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
			return nil
		}
		switch t.Kind() {
		case reflect.Pointer:
			t = t.Elem()
		case reflect.Interface:
			return nil
		default:
			return t
		}
	}
	return nil
}

// structFields are the JSON names of a struct's fields and their types, as
// encoding/json sees them (embedded structs promoted, "-" left out).
type structFields struct {
	byName map[string]reflect.Type
}

var fieldCache sync.Map // reflect.Type → *structFields

func fieldsOf(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	f := &structFields{byName: map[string]reflect.Type{}}
	collectFields(t, f.byName, 0)
	fieldCache.Store(t, f)
	return f
}

func collectFields(t reflect.Type, into map[string]reflect.Type, depth int) {
	if depth > 8 {
		return
	}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectFields(ft, into, depth+1)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if _, taken := into[name]; !taken || depth == 0 {
			into[name] = sf.Type
		}
	}
}

// quoteKey quotes a key path for a message, shortened like any echoed input.
func quoteKey(k string) string { return `"` + safeText(k) + `"` }
