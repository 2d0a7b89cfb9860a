// Package api holds vmgate's HTTP contract, api/openapi.yaml, embedded so the server
// can serve it at /api/v1/openapi.json and tests can validate responses against it.
package api

import _ "embed"

// OpenAPIYAML is the OpenAPI 3.1 description of the HTTP API.
//
//go:embed openapi.yaml
var OpenAPIYAML []byte
