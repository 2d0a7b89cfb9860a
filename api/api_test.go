package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestOpenAPIJSONIsTheYAML: the served JSON holds exactly what the YAML says, and
// keeps its key order (openapi first).
func TestOpenAPIJSONIsTheYAML(t *testing.T) {
	js, err := OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(js), `{"openapi":"3.1.0",`) {
		t.Errorf("the JSON does not start with the openapi version: %.60s", js)
	}
	var fromJSON, fromYAML any
	if err := json.Unmarshal(js, &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(OpenAPIYAML, &fromYAML); err != nil {
		t.Fatal(err)
	}
	// yaml.v3 decodes integers as int; compare through JSON's own types.
	b, err := json.Marshal(fromYAML)
	if err != nil {
		t.Fatal(err)
	}
	var yamlAsJSON any
	if err := json.Unmarshal(b, &yamlAsJSON); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSON, yamlAsJSON) {
		t.Error("the converted JSON differs from the YAML")
	}
}

func TestYAMLToJSON(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a: 1\nb: [x, 2.5, true, null]\nc: {d: \"200\"}\n", `{"a":1,"b":["x",2.5,true,null],"c":{"d":"200"}}`},
		{"z: 1\na: 2\n", `{"z":1,"a":2}`},
		{"t: 2026-11-22T10:00:00Z\n", `{"t":"2026-11-22T10:00:00Z"}`},
		{"base: &b {x: 1}\nuse: *b\n", `{"base":{"x":1},"use":{"x":1}}`},
		{"s: |\n  two\n  lines\n", `{"s":"two\nlines\n"}`},
		{"n: 0x10\n", `{"n":16}`},
	} {
		got, err := YAMLToJSON([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("%q: %s %v, want %s", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{
		"200: ok\n",                   // a status code must be quoted: JSON keys are strings
		"a: 1\na: 2\n",                // duplicate key
		"b: &b {x: 1}\nc: {<<: *b}\n", // merge keys are YAML only
		"f: .inf\n",                   // no JSON number
		"x: !!binary aGk=\n",          // no JSON type
		"a: 1\n---\nb: 2\n",           // two documents
	} {
		if got, err := YAMLToJSON([]byte(bad)); err == nil {
			t.Errorf("%q converted to %s", bad, got)
		}
	}
}
