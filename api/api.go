// Package api holds vmgate's HTTP contract, api/openapi.yaml, embedded so the server
// can serve it at /api/v1/openapi.json and tests can validate answers against it.
package api

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"gopkg.in/yaml.v3"
)

// OpenAPIYAML is the OpenAPI 3.1 description of the HTTP API.
//
//go:embed openapi.yaml
var OpenAPIYAML []byte

// OpenAPIJSON returns the document as JSON, keys in the document's order.
//
// The conversion is plain YAML → JSON: an OpenAPI 3.1 document is JSON data, and
// no OpenAPI library is needed (nor trusted: the one vmgate used read 3.1 as 3.0).
// Mapping keys must be strings (a status code is written "200", not 200), and
// YAML-only values (merge keys, infinities, binary) are refused, so that the JSON
// is exactly what the YAML says.
func OpenAPIJSON() ([]byte, error) {
	return YAMLToJSON(OpenAPIYAML)
}

// YAMLToJSON converts one YAML document to compact JSON, keeping the key order.
func YAMLToJSON(src []byte) ([]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc, more yaml.Node
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) || doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("not one YAML document")
	}
	var b bytes.Buffer
	if err := writeJSON(&b, doc.Content[0], 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// maxDepth bounds the nesting (and alias expansion) of a converted document.
const maxDepth = 100

func writeJSON(b *bytes.Buffer, n *yaml.Node, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("line %d: nested deeper than %d", n.Line, maxDepth)
	}
	switch n.Kind {
	case yaml.AliasNode:
		return writeJSON(b, n.Alias, depth+1)
	case yaml.MappingNode:
		b.WriteByte('{')
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				return fmt.Errorf("line %d: mapping key %q is not a string (quote it)", k.Line, k.Value)
			}
			if seen[k.Value] {
				return fmt.Errorf("line %d: duplicate key %q", k.Line, k.Value)
			}
			seen[k.Value] = true
			if i > 0 {
				b.WriteByte(',')
			}
			key, _ := json.Marshal(k.Value)
			b.Write(key)
			b.WriteByte(':')
			if err := writeJSON(b, v, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, c, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		return writeScalar(b, n)
	default:
		return fmt.Errorf("line %d: unexpected YAML node", n.Line)
	}
	return nil
}

func writeScalar(b *bytes.Buffer, n *yaml.Node) error {
	var v any
	switch n.Tag {
	case "!!str", "!!timestamp":
		// A timestamp stays the text it was written as: JSON has no time type.
		v = n.Value
	case "!!null":
		v = nil
	case "!!bool", "!!int", "!!float":
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
	default:
		return fmt.Errorf("line %d: YAML type %s has no JSON equivalent", n.Line, n.Tag)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	b.Write(out)
	return nil
}
