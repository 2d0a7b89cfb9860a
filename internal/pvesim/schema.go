package pvesim

import (
	"embed"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The parameter schemas of the emulated releases, one per release, extracted
// from proxmox/pve-docs api-viewer/apidata.js at the commit each
// VersionInfo.Schema names (see schema/README.md and docs/reference/pve-api.md
// §6). Parameters are validated from the cluster's release, so the emulator
// accepts exactly what that PVE accepts.
//
//go:embed schema/*.json
var schemaFiles embed.FS

func mustReadSchema(release string) []byte {
	b, err := schemaFiles.ReadFile("schema/pve-api-schema-" + release + ".json")
	if err != nil {
		panic(fmt.Sprintf("pvesim: schema of PVE %s: %v", release, err))
	}
	return b
}

// schemaJSON and apiSchema are the default release's schema.
var (
	schemaJSON = mustReadSchema(DefaultVersion)
	apiSchema  = mustLoadSchema(schemaJSON)
)

// SchemaJSON returns the default release's embedded PVE schema document
// (path → method → method schema), for conformance tests.
func SchemaJSON() []byte { return append([]byte(nil), schemaJSON...) }

// SchemaJSONFor returns the embedded schema document of an emulated release.
func SchemaJSONFor(release string) ([]byte, error) {
	r, err := lookupRelease(release)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), r.raw...), nil
}

// methodSchema is one method of the schema document.
type methodSchema struct {
	Name       string `json:"name"`
	Method     string `json:"method"`
	Proxyto    string `json:"proxyto"`
	Protected  int    `json:"protected"`
	AllowToken *int   `json:"allowtoken"`
	Parameters struct {
		AdditionalProperties int                     `json:"additionalProperties"`
		Properties           map[string]*paramSchema `json:"properties"`
	} `json:"parameters"`
	Permissions json.RawMessage `json:"permissions"`
}

// paramSchema is one parameter (or one key of a property-string format).
type paramSchema struct {
	Type      string          `json:"type"`
	Format    json.RawMessage `json:"format"`
	Optional  json.RawMessage `json:"optional"`
	Minimum   json.RawMessage `json:"minimum"`
	Maximum   json.RawMessage `json:"maximum"`
	MaxLength *int            `json:"maxLength"`
	MinLength *int            `json:"minLength"`
	Pattern   string          `json:"pattern"`
	Enum      []string        `json:"enum"`
	Requires  string          `json:"requires"`
	DefaultKy json.RawMessage `json:"default_key"`

	optional   bool
	formatName string                  // a named format ("pve-node")
	propFormat map[string]*paramSchema // a property-string format (machine)
	defaultKey string                  // the property-string key a bare value belongs to
	min, max   *float64
	minText    string // PVE prints the bound as written in the schema
	maxText    string
	re         *regexp.Regexp
}

// schemaDoc maps a PVE path ("/nodes/{node}/qemu") and method to its schema.
type schemaDoc map[string]map[string]*methodSchema

func mustLoadSchema(raw []byte) schemaDoc {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		panic(fmt.Sprintf("pvesim: embedded schema: %v", err))
	}
	doc := schemaDoc{}
	for path, v := range top {
		if !strings.HasPrefix(path, "/") {
			continue // "_source"
		}
		var methods map[string]*methodSchema
		if err := json.Unmarshal(v, &methods); err != nil {
			panic(fmt.Sprintf("pvesim: embedded schema %s: %v", path, err))
		}
		for m, ms := range methods {
			for name, p := range ms.Parameters.Properties {
				if err := p.compile(); err != nil {
					panic(fmt.Sprintf("pvesim: embedded schema %s %s %s: %v", m, path, name, err))
				}
			}
		}
		doc[path] = methods
	}
	return doc
}

func truthy(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "0" && s != "false" && s != "null" && s != `""` && s != `"0"`
}

func (p *paramSchema) compile() error {
	p.optional = truthy(p.Optional)
	if len(p.Format) > 0 {
		if p.Format[0] == '"' {
			if err := json.Unmarshal(p.Format, &p.formatName); err != nil {
				return err
			}
		} else if err := json.Unmarshal(p.Format, &p.propFormat); err != nil {
			return err
		}
		for k, sub := range p.propFormat {
			if err := sub.compile(); err != nil {
				return err
			}
			if truthy(sub.DefaultKy) {
				p.defaultKey = k
			}
		}
	}
	bound := func(raw json.RawMessage) (*float64, string, error) {
		if len(raw) == 0 {
			return nil, "", nil
		}
		text := strings.Trim(string(raw), `"`)
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, "", err
		}
		return &f, text, nil
	}
	var err error
	if p.min, p.minText, err = bound(p.Minimum); err != nil {
		return err
	}
	if p.max, p.maxText, err = bound(p.Maximum); err != nil {
		return err
	}
	if p.Pattern != "" {
		// A qr// dumped by Perl reads "(?^:...)": a group with default flags.
		pattern := strings.ReplaceAll(p.Pattern, "(?^:", "(?:")
		if p.re, err = regexp.Compile(`^(?:` + pattern + `)$`); err != nil {
			return err
		}
	}
	return nil
}

// valueKind says what Perl would see for a decoded parameter.
type valueKind int

const (
	scalarValue valueKind = iota // a string or number: Perl checks its text
	boolValue                    // a JSON true/false (JSON::PP::Boolean)
	arrayValue                   // a repeated form key or a JSON array
	objectValue                  // a JSON object
)

// value is one request parameter as PVE's parameter checker sees it.
type value struct {
	kind valueKind
	s    string // the text of a scalar; "1"/"0" for a JSON boolean
}

// perlRef is what Perl prints for a reference in "type check failed - got X".
func (v value) perlRef() string {
	switch v.kind {
	case boolValue:
		return "JSON::PP::Boolean"
	case arrayValue:
		return "ARRAY"
	case objectValue:
		return "HASH"
	}
	return ""
}

// paramErrors collects validation messages per parameter, joined as PVE does
// (with a literal backslash-n).
type paramErrors map[string]string

func (e paramErrors) add(key, msg string) {
	if key == "" {
		key = "_root"
	}
	if old, ok := e[key]; ok {
		e[key] = old + `\n` + msg
		return
	}
	e[key] = msg
}

// validate checks params against the method's schema exactly as
// PVE::JSONSchema::validate does, returning nil when they pass.
func (m *methodSchema) validate(params map[string]value) paramErrors {
	errs := paramErrors{}
	props := m.Parameters.Properties
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v, ok := params[k]
		checkProp(k, props[k], v, ok && v.kind != nullValue, errs)
	}
	for k := range params {
		p, ok := props[k]
		if !ok {
			if m.Parameters.AdditionalProperties == 0 {
				errs.add(k, "property is not defined in schema and the schema does not allow additional properties")
			}
			continue
		}
		if p.Requires != "" {
			if v, ok := params[p.Requires]; !ok || v.kind == nullValue {
				errs.add(p.Requires, fmt.Sprintf("missing property required by '%s'", k))
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

func checkProp(path string, p *paramSchema, v value, present bool, errs paramErrors) {
	if !present {
		if !p.optional {
			errs.add(path, "property is missing and it is not optional")
		}
		return
	}
	if !checkType(path, p.Type, v, errs) {
		return
	}
	if v.kind != scalarValue {
		return // a JSON boolean passed its type check; nothing more to look at
	}
	s := v.s
	if p.formatName != "" || p.propFormat != nil {
		if msg := checkFormat(path, p, s); msg != "" {
			errs.add(path, "invalid format - "+msg)
			return
		}
	}
	if p.re != nil && !p.re.MatchString(s) {
		errs.add(path, "value does not match the regex pattern")
		return
	}
	if p.MaxLength != nil && len([]rune(s)) > *p.MaxLength {
		errs.add(path, fmt.Sprintf("value may only be %d characters long", *p.MaxLength))
		return
	}
	if p.MinLength != nil && len([]rune(s)) < *p.MinLength {
		errs.add(path, fmt.Sprintf("value must be at least %d characters long", *p.MinLength))
		return
	}
	if isPerlNumber(s) {
		f, _ := strconv.ParseFloat(strings.TrimPrefix(s, "+"), 64)
		if p.max != nil && f > *p.max {
			errs.add(path, "value must have a maximum value of "+p.maxText)
			return
		}
		if p.min != nil && f < *p.min {
			errs.add(path, "value must have a minimum value of "+p.minText)
			return
		}
	}
	if len(p.Enum) > 0 {
		for _, e := range p.Enum {
			if e == s {
				return
			}
		}
		errs.add(path, fmt.Sprintf("value '%s' does not have a value in the enumeration '%s'", s, strings.Join(p.Enum, ", ")))
	}
}

var (
	perlNumberRE  = regexp.MustCompile(`^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$`)
	perlIntegerRE = regexp.MustCompile(`^[+-]?\d+$`)
)

func isPerlNumber(s string) bool { return perlNumberRE.MatchString(s) }

func checkType(path, typ string, v value, errs paramErrors) bool {
	if v.kind != scalarValue {
		if typ == "boolean" && v.kind == boolValue {
			return true
		}
		if typ == "" || typ == "any" {
			return true
		}
		errs.add(path, fmt.Sprintf("type check ('%s') failed - got %s", typ, v.perlRef()))
		return false
	}
	switch typ {
	case "boolean":
		if v.s != "1" && v.s != "0" {
			errs.add(path, fmt.Sprintf("type check ('%s') failed - got '%s'", typ, v.s))
			return false
		}
	case "integer":
		if !perlIntegerRE.MatchString(v.s) {
			errs.add(path, fmt.Sprintf("type check ('%s') failed - got '%s'", typ, v.s))
			return false
		}
	case "number":
		if !isPerlNumber(v.s) {
			errs.add(path, fmt.Sprintf("type check ('%s') failed - got '%s'", typ, v.s))
			return false
		}
	}
	return true
}

// checkFormat returns the die text of PVE's format verifier ("" when valid),
// including the trailing newline PVE's messages carry.
func checkFormat(path string, p *paramSchema, s string) string {
	if p.propFormat != nil {
		return checkPropertyString(path, p, s)
	}
	name := p.formatName
	list := false
	if strings.HasSuffix(name, "-list") {
		name, list = strings.TrimSuffix(name, "-list"), true
	}
	if list {
		for _, item := range splitList(s) {
			if msg := checkNamedFormat(name, item); msg != "" {
				return msg
			}
		}
		return ""
	}
	return checkNamedFormat(name, s)
}

var (
	nodeNameRE  = regexp.MustCompile(`^([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$`)
	vmidRE      = regexp.MustCompile(`^[1-9][0-9]{2,8}$`)
	realmRE     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9\.\-_]+$`)
	storageIDRE = regexp.MustCompile(`(?i)^[a-z][a-z0-9\-_.]*[a-z0-9]$`)
	taskStateRE = regexp.MustCompile(`(?i)^(ok|error|warning|unknown)$`)
	privNameRE  = regexp.MustCompile(`^[A-Z][A-Za-z]*\.[A-Za-z.]+$`)
	configIDRE  = regexp.MustCompile(`(?i)^[a-z][a-z0-9_-]+$`)
	// haResourceOrVMIDRE is m/^([a-z]+:\S+|\d+)$/ (Perl's $ also before a
	// final newline, which a parameter does not carry here).
	haResourceOrVMIDRE = regexp.MustCompile(`^([a-z]+:\S+|\d+)$`)
)

func checkNamedFormat(name, s string) string {
	switch name {
	case "pve-storage-id": // PVE::JSONSchema::parse_id
		if len(s) < 2 {
			return fmt.Sprintf("storage ID '%s' cannot be shorter than 2 characters\n", s)
		}
		if !storageIDRE.MatchString(s) {
			return fmt.Sprintf("storage ID '%s' contains illegal characters\n", s)
		}
	case "pve-node":
		if !nodeNameRE.MatchString(s) {
			return "value does not look like a valid node name\n"
		}
	case "pve-vmid":
		if !vmidRE.MatchString(s) {
			return "value does not look like a valid VM ID\n"
		}
	case "pve-realm":
		if !realmRE.MatchString(s) {
			return "value does not look like a valid realm\n"
		}
	case "CIDR":
		if !validCIDR(s) {
			return "value does not look like a valid CIDR network\n"
		}
	case "storage-pair":
		if _, err := parseIDMap(s); err != nil {
			return err.Error() + "\n"
		}
	case "bridge-pair": // remote migration's target-bridge (PVE::JSONSchema::parse_idmap with pve-bridge-id)
		if _, err := parseIDMap(s); err != nil {
			return err.Error() + "\n"
		}
	case "pve-bridge-id":
		if !bridgeIDRE.MatchString(s) {
			return fmt.Sprintf("invalid bridge ID '%s'\n", s)
		}
	case "proxmox-remote": // remote migration's target-endpoint (PVE::JSONSchema proxmox-remote)
		if _, err := parseRemoteEndpoint(s); err != nil {
			return err.Error() + "\n"
		}
	case "pve-task-status-type":
		if !taskStateRE.MatchString(s) {
			return fmt.Sprintf("invalid status '%s'\n", s)
		}
	case "pve-priv":
		if !privNameRE.MatchString(s) {
			return fmt.Sprintf("invalid privilege '%s'\n", s)
		}
	case "pve-ha-resource-or-vm-id": // PVE::HA::Tools::pve_verify_ha_resource_or_vm_id
		if !haResourceOrVMIDRE.MatchString(s) {
			return "value does not look like a valid ha resource id\n"
		}
	case "pve-configid": // PVE::JSONSchema::pve_verify_configid
		if !configIDRE.MatchString(s) {
			return fmt.Sprintf("invalid configuration ID '%s'\n", s)
		}
	default:
		return fmt.Sprintf("undefined format '%s'\n", name)
	}
	return ""
}

func validCIDR(s string) bool {
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		return false
	}
	bits := pfx.Bits()
	if pfx.Addr().Is4() {
		return bits > 7 && bits <= 32
	}
	return bits > 7 && bits <= 128
}

// splitList is PVE::Tools::split_list: commas, semicolons and whitespace separate.
func splitList(s string) []string {
	if strings.Contains(s, "\x00") {
		return strings.Split(s, "\x00")
	}
	return strings.Fields(strings.NewReplacer(",", " ", ";", " ").Replace(s))
}

// idMap is a parsed storage map (PVE::JSONSchema::parse_idmap). Its errors carry
// Perl's die text, trailing newlines included.
type idMap struct {
	identity bool
	def      string
	entries  map[string]string
}

func parseIDMap(s string) (*idMap, error) {
	m := &idMap{entries: map[string]string{}}
	checkID := func(entry, id string) error {
		if len(id) < 2 {
			return fmt.Errorf("entry '%s' contains invalid ID - storage ID '%s' cannot be shorter than 2 characters\n\n", entry, id)
		}
		if !storageIDRE.MatchString(id) {
			return fmt.Errorf("entry '%s' contains invalid ID - storage ID '%s' contains illegal characters\n\n", entry, id)
		}
		return nil
	}
	for _, entry := range splitList(s) {
		switch src, dst, pair := strings.Cut(entry, ":"); {
		case entry == "1":
			m.identity = true
		case pair && src != "" && dst != "" && !strings.Contains(dst, ":"):
			if err := checkID(entry, src); err != nil {
				return nil, err
			}
			if err := checkID(entry, dst); err != nil {
				return nil, err
			}
			if _, dup := m.entries[src]; dup {
				return nil, fmt.Errorf("duplicate mapping for source '%s'\n", src)
			}
			m.entries[src] = dst
		default:
			if err := checkID(entry, entry); err != nil {
				return nil, err
			}
			if m.def != "" {
				return nil, fmt.Errorf("default target ID can only be provided once\n")
			}
			m.def = entry
		}
	}
	if m.identity && (m.def != "" || len(m.entries) > 0) {
		return nil, fmt.Errorf("identity mapping cannot be combined with other mappings\n")
	}
	return m, nil
}

// target maps a source storage through the map (PVE::JSONSchema::map_id).
func (m *idMap) target(src string) string {
	if m == nil {
		return src
	}
	if t, ok := m.entries[src]; ok {
		return t
	}
	if m.def != "" {
		return m.def
	}
	return src
}

// checkPropertyString is PVE::JSONSchema::parse_property_string for the
// hash formats in the schema (start's "machine").
func checkPropertyString(path string, p *paramSchema, s string) string {
	res := map[string]value{}
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, hasEq := strings.Cut(part, "=")
		switch {
		case hasEq && k != "" && v != "":
			if _, dup := res[k]; dup {
				return "duplicate key in comma-separated list property: " + k + "\n"
			}
			sub, ok := p.propFormat[k]
			if !ok {
				return "invalid key in comma-separated list property: " + k + "\n"
			}
			if sub.Type == "boolean" {
				v = parseBoolean(v)
			}
			res[k] = value{s: v}
		case !hasEq:
			if p.defaultKey == "" {
				return "value without key, but schema does not define a default key\n"
			}
			if _, dup := res[p.defaultKey]; dup {
				return "duplicate key in comma-separated list property: " + p.defaultKey + "\n"
			}
			res[p.defaultKey] = value{s: part}
		default:
			return "missing key in comma-separated list property\n"
		}
	}
	errs := paramErrors{}
	keys := make([]string, 0, len(p.propFormat))
	for k := range p.propFormat {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok := res[k]
		checkProp(path+"."+k, p.propFormat[k], v, ok, errs)
	}
	if len(errs) == 0 {
		return ""
	}
	msg := "format error\n"
	ks := make([]string, 0, len(errs))
	for k := range errs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		msg += k + ": " + errs[k] + "\n"
	}
	return msg
}

func parseBoolean(s string) string {
	switch strings.ToLower(s) {
	case "1", "on", "yes", "true":
		return "1"
	case "0", "off", "no", "false":
		return "0"
	}
	return s
}

// perlNumber renders a JSON number the way Perl stringifies it after
// decode_json: integers stay as written, other numbers print like %.15g.
func perlNumber(n json.Number) string {
	s := n.String()
	if perlIntegerRE.MatchString(s) {
		return strings.TrimPrefix(s, "+")
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', 15, 64)
}
