package pve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"

	"testing"
)

// The reference readers below are the lenient scalar types as they were
// before their fast paths: the fast paths must give exactly what these give,
// values and errors alike.

func refBool(data []byte) (bool, error) {
	data = bytes.TrimSpace(data)
	switch string(data) {
	case "true", "1", `"1"`, `"true"`:
		return true, nil
	case "false", "0", `"0"`, `"false"`, `""`, "null":
		return false, nil
	}
	if f, err := strconv.ParseFloat(string(data), 64); err == nil && (f == 0 || f == 1) {
		return f == 1, nil
	}
	return false, fmt.Errorf("pve: %s is not a boolean", truncate(string(data), 40))
}

func refInt(data []byte) (int64, error) {
	s, ok := numberText(data)
	if !ok {
		return 0, fmt.Errorf("pve: %s is not an integer", truncate(string(data), 40))
	}
	if s == "" {
		return 0, nil
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) || math.Abs(f) > 1<<62 {
		return 0, fmt.Errorf("pve: %s is not an integer", truncate(s, 40))
	}
	return int64(f), nil
}

func refFloat(data []byte) (float64, error) {
	s, ok := numberText(data)
	if !ok {
		return 0, fmt.Errorf("pve: %s is not a number", truncate(string(data), 40))
	}
	if s == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("pve: %s is not a number", truncate(s, 40))
	}
	return f, nil
}

func refString(data []byte) (string, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var v string
		if err := json.Unmarshal(data, &v); err != nil {
			return "", err
		}
		return v, nil
	}
	switch {
	case string(data) == "null":
		return "", nil
	case len(data) > 0 && (data[0] == '-' || '0' <= data[0] && data[0] <= '9'):
		var num json.Number
		if err := json.Unmarshal(data, &num); err != nil {
			return "", err
		}
		return num.String(), nil
	}
	return "", fmt.Errorf("pve: %s is not a string", truncate(string(data), 40))
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// checkScalars compares each lenient type with its reference on data, both
// called directly and through encoding/json.
func checkScalars(t *testing.T, data []byte) {
	t.Helper()
	{
		var got Bool
		err := got.UnmarshalJSON(data)
		want, werr := refBool(data)
		if errText(err) != errText(werr) || err == nil && bool(got) != want {
			t.Errorf("Bool(%q) = %v, %v; want %v, %v", data, got, err, want, werr)
		}
	}
	{
		var got flexInt
		err := got.UnmarshalJSON(data)
		want, werr := refInt(data)
		if errText(err) != errText(werr) || err == nil && int64(got) != want {
			t.Errorf("flexInt(%q) = %v, %v; want %v, %v", data, got, err, want, werr)
		}
	}
	{
		var got flexFloat
		err := got.UnmarshalJSON(data)
		want, werr := refFloat(data)
		if errText(err) != errText(werr) || err == nil && math.Float64bits(float64(got)) != math.Float64bits(want) {
			t.Errorf("flexFloat(%q) = %v, %v; want %v, %v", data, got, err, want, werr)
		}
	}
	{
		var got flexString
		err := got.UnmarshalJSON(data)
		want, werr := refString(data)
		if errText(err) != errText(werr) || err == nil && string(got) != want {
			t.Errorf("flexString(%q) = %q, %v; want %q, %v", data, got, err, want, werr)
		}
	}
}

var scalarSeeds = []string{
	`0`, `1`, `-0`, `-1`, `true`, `false`, `null`, `""`, `"0"`, `"1"`, `"true"`, `"false"`,
	`2`, `1.0`, `0.0`, `-0.0`, `1.`, `.5`, `-.5`, `"1."`, `007`, `"007"`, `01`, `1e3`, `1E3`, `"1e3"`,
	`5.5`, `0.25`, `"0.25"`, `" 5 "`, `" 5"`, ` 5`, `"5 "`, `"-"`, `-`, `+5`, `"+5"`, `"`, `"5`, `5"`,
	`123456789012345678`, `1234567890123456789`, `9223372036854775807`, `9223372036854775808`,
	`-9223372036854775808`, `99999999999999999999`, `4294967296.0`, `1e300`, `1e-300`,
	`0.00279069767441861`, `0.002790697674418611`, `123456789012345.6`, `1234567890123456.7`,
	`0.0000000000000000000001`, `0.00000000000000000000001`, `0.123456789012345678901234`,
	`9007199254740993`, `900719925474099.3`, `"0x10"`, `"1_000"`, `"Inf"`, `"NaN"`, `"1 2"`,
	`"qemu/100"`, `"running"`, `"stopped"`, `"qemu"`, `"pve1"`, `"a\"b"`, `"a\\b"`, `"\u0041"`,
	`"é"`, "\"\xff\"", "\"a\x01\"", "\"a\x7f\"", `"a"b"`, `"1"2"`, `{}`, `[]`, `"yes"`, `"on"`,
	`100`, `-100`, `"100"`, `"-3"`, "\t1", "1\n", `1.5.5`, `1..5`, `-1.5`, `"-1.5"`, `--1`, `1-`,
}

func TestLenientScalarsMatchReference(t *testing.T) {
	t.Parallel()
	for _, s := range scalarSeeds {
		checkScalars(t, []byte(s))
	}
}

func FuzzLenientScalars(f *testing.F) {
	for _, s := range scalarSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkScalars(t, data)
	})
}

func TestLenientScalarsDoNotAllocate(t *testing.T) {
	var b Bool
	var n flexInt
	var f flexFloat
	var str flexString
	for _, c := range []struct {
		u  json.Unmarshaler
		in []string
	}{
		{&b, []string{`0`, `1`, `true`, `false`, `null`, `"1"`}},
		{&n, []string{`123456`, `-5`, `"4294967296"`, `null`}},
		{&f, []string{`0.00279069767441861`, `2`, `"0.25"`, `-1.5`}},
		{&str, []string{`"running"`, `"qemu"`, `""`, `null`}},
	} {
		for _, in := range c.in {
			data := []byte(in)
			if allocs := testing.AllocsPerRun(100, func() {
				if err := c.u.UnmarshalJSON(data); err != nil {
					t.Fatal(err)
				}
			}); allocs > 0 {
				t.Errorf("%T(%s): %v allocations", c.u, in, allocs)
			}
		}
	}
}

// checkEnvelope holds decodeAnswerFast to decodeEnvelope and decodeData: when
// it takes an answer, they take it too, with the same data and total.
func checkEnvelope(t *testing.T, body []byte) {
	t.Helper()
	outs := []func() any{
		func() any { return new([]resourceWire) },
		func() any { return new(flexString) },
		func() any { return new(map[string]any) },
		func() any { return new(any) },
	}
	for _, mk := range outs {
		fast, ref := mk(), mk()
		total, ok := decodeAnswerFast(body, fast)
		data, rtotal, err := decodeEnvelope(body)
		if err == nil {
			err = decodeData(data, ref)
		}
		if ok && (err != nil || total != rtotal || !reflect.DeepEqual(fast, ref)) {
			t.Fatalf("%q into %T: fast %v %d %#v; reference %v %d %#v", body, fast, ok, total, fast, err, rtotal, ref)
		}
		// decodeAnswer gives the reference's answer whatever the fast pass did.
		got := mk()
		gtotal, envErr, dataErr := decodeAnswer(body, got)
		if err == nil && (envErr != nil || dataErr != nil || gtotal != rtotal || !reflect.DeepEqual(got, ref)) {
			t.Fatalf("%q into %T: decodeAnswer %d %v %v %#v; reference %d %#v", body, got, gtotal, envErr, dataErr, got, rtotal, ref)
		}
		if err != nil && envErr == nil && dataErr == nil {
			t.Fatalf("%q into %T: decodeAnswer accepted what the reference refuses (%v)", body, got, err)
		}
	}
	_, envErr, _ := decodeAnswer(body, nil)
	_, _, rerr := decodeEnvelope(body)
	if errText(envErr) != errText(rerr) {
		t.Fatalf("%q without out: %v; reference %v", body, envErr, rerr)
	}
}

var envelopeSeeds = []string{
	`{"data":[]}`, `{"data":null}`, `{}`, `{"data":[],"total":3}`, `{"total":3,"data":[]}`,
	`{"data":"UPID:pve1:0000A1B2:0001C3D4:65A1B2C3:qmstart:100:root@pam!vmgate:"}`,
	`{"data":[{"id":"qemu/100","vmid":100,"node":"pve1","type":"qemu","status":"running","template":0,"cpu":0.25,"maxmem":"1024"}]}`,
	` {"data" : [ {"vmid" : "100"} ] , "total" : "2" } `, `{"DATA":[]}`, `{"Data":[],"data":[{"vmid":1}]}`,
	`{"data":[{"vmid":1}],"data":[]}`, `{"data":[],"total":1,"total":2}`, `{"data":[],"total":"x"}`,
	`{"data":[],"success":1,"message":"ok\n","errors":{}}`, `{"data":[],"x":[1,2,}`, `{"data":[]}x`,
	`{"data":[]} {}`, `{"data":[],}`, `{,"data":[]}`, `{"data":[]`, `{"data" []}`, `{"d\u0061ta":[]}`,
	`{"data":"a\"b"}`, `{"data":"a\\"}`, `{"data":{"a":"}"}}`, `{"data":[[[]]]}`, `{"data":[}`,
	`{"data":1}`, `{"data":true}`, `{"data":-1.5e3}`, `{"data":nul}`, `{"data":nullx}`, "\ufeff{\"data\":[]}",
	"{\"data\":[]}\v", "\v{\"data\":[]}", `[{"data":[]}]`, `"data"`, ``, `{"total":1}`, `{"data":[{"vmid":1.5}]}`,
	`{"data":[{"vmid":"x"}]}`, `{"data":[{"template":2}]}`, `{"data":{"vmid":1}}`, `{"data":[1]}`,
	"{\"data\":\"\x01\"}", "{\"\x01\":1,\"data\":[]}", `{"dat":[],"data":[]}`, `{"datas":[],"data":[]}`,
	`{"data":[{"id":"qemu/100","id":"qemu/101","ID":"x"}]}`, `{"total":1e3,"data":[]}`, `{"total":null,"data":[]}`,
}

func TestDecodeAnswerFastMatchesReference(t *testing.T) {
	t.Parallel()
	for _, s := range envelopeSeeds {
		checkEnvelope(t, []byte(s))
	}
	// The usual answers do take the fast pass.
	for _, s := range []string{`{"data":[]}`, `{"data":[{"vmid":"100"}],"total":"2"}`, ` {"DATA" : [] } `,
		`{"data":[],"success":1,"message":"x"}`} {
		var w []resourceWire
		if _, ok := decodeAnswerFast([]byte(s), &w); !ok {
			t.Errorf("%s not decoded in one pass", s)
		}
	}
	body := resources10kBody()
	var w []resourceWire
	if total, ok := decodeAnswerFast(body, &w); !ok || total != 0 || len(w) != 10000 {
		t.Fatalf("10k body: %v %d %d", ok, total, len(w))
	}
	checkEnvelope(t, body[:len(body)-1])
}

func FuzzDecodeAnswer(f *testing.F) {
	for _, s := range envelopeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 1<<16 {
			return
		}
		checkEnvelope(t, body)
	})
}
