package pve

import (
	"compress/gzip"
	"context"
	"net/http"
	"reflect"
	"sync/atomic"
	"testing"
)

// checkResources holds the one-pass decoder of /cluster/resources to the
// general path (decodeEnvelope, decodeData into []resourceWire): when it takes
// an answer, the general path takes it too, with the same resources and total;
// and resourcesAnswer gives the general path's answer whatever it did.
func checkResources(t *testing.T, body []byte) {
	t.Helper()
	var w []resourceWire
	data, rtotal, err := decodeEnvelope(body)
	if err == nil {
		err = decodeData(data, &w)
	}
	ref := resourcesFromWire(w)
	res, total, ok := decodeResourcesFast(body)
	if ok && (err != nil || total != rtotal || !reflect.DeepEqual(res, ref)) {
		t.Fatalf("%q: fast %d %#v; reference %v %d %#v", body, total, res, err, rtotal, ref)
	}
	var a resourcesAnswer
	gtotal, envErr, dataErr := decodeAnswer(body, &a)
	if err == nil && (envErr != nil || dataErr != nil || gtotal != rtotal || !reflect.DeepEqual(a.res, ref)) {
		t.Fatalf("%q: resourcesAnswer %d %v %v %#v; reference %d %#v", body, gtotal, envErr, dataErr, a.res, rtotal, ref)
	}
	if err != nil && envErr == nil && dataErr == nil {
		t.Fatalf("%q: resourcesAnswer accepted what the reference refuses (%v)", body, err)
	}
}

var resourceSeeds = append([]string{
	`{"data":[{"id":"qemu/100","vmid":100,"node":"pve1","type":"qemu","status":"running","name":"web","tags":"a;b",` +
		`"lock":"backup","hastate":"started","pool":"p","storage":"s","maxmem":4294967296,"mem":"1024","maxcpu":2,` +
		`"cpu":0.25,"maxdisk":1,"disk":0,"uptime":"5","template":0,"netin":1,"diskwrite":2e3}],"total":1}`,
	`{"data":[{"vmid":100,"VMID":101,"Name":"x","name":"y","NaMe":"z"}]}`,
	`{"data":[{"name":"a\"b"}]}`, `{"data":[{"name":"é"}]}`, `{"data":[{"name":null,"vmid":null,"cpu":null,"template":null}]}`,
	`{"data":[{"name":100}]}`, `{"data":[{"name":-1.5e3}]}`, `{"data":[{"name":true}]}`, `{"data":[{"vmid":1e2}]}`,
	`{"data":[{"vmid":"1e2"}]}`, `{"data":[{"vmid":" 1"}]}`, `{"data":[{"vmid":01}]}`, `{"data":[{"vmid":-0}]}`,
	`{"data":[{"cpu":1.}]}`, `{"data":[{"cpu":.5}]}`, `{"data":[{"cpu":1e}]}`, `{"data":[{"cpu":"0.5"}]}`,
	`{"data":[{"template":"1"}]}`, `{"data":[{"template":true}]}`, `{"data":[{"template":1.0}]}`, `{"data":[{"x":{}}]}`,
	`{"data":[{"x":[]}]}`, `{"data":[{}]}`, `{"data":[{},{}]}`, `{"data":[{"vmid":1},]}`, `{"data":[{"vmid":1,}]}`,
	`{"data":[{"vmid":1}{"vmid":2}]}`, `{"data":[ { "vmid" : 1 } , { "vmid" : 2 } ] }`, `{"data":[{"vmid":1}],"total":"x"}`,
	`{"data":[{"vmid":tru}]}`, `{"data":[{"vmid":nullx}]}`, `{"data":[{"name":"a` + "\x7f" + `"}]}`,
	`{"data":[{"vmid":4294967296000}]}`, `{"data":[{"vmid":123456789012345678901}]}`,
}, envelopeSeeds...)

func TestDecodeResourcesFastMatchesReference(t *testing.T) {
	t.Parallel()
	for _, s := range resourceSeeds {
		checkResources(t, []byte(s))
	}
	body := resources10kBody()
	if res, _, ok := decodeResourcesFast(body); !ok || len(res) != 10000 {
		t.Fatalf("10k body not decoded in one pass: %v %d", ok, len(res))
	}
	checkResources(t, body)
	checkResources(t, body[:len(body)-1])
}

// The one pass costs no allocation per VM: the answer copied once into a string,
// the result slice (and its rare regrowth), and the odd value that needs strconv.
func TestDecodeResourcesAllocations(t *testing.T) {
	body := resources10kBody()
	allocs := testing.AllocsPerRun(3, func() {
		if _, _, ok := decodeResourcesFast(body); !ok {
			t.Fatal("not decoded in one pass")
		}
	})
	if allocs > 1000 {
		t.Fatalf("%v allocations for 10 000 VMs", allocs)
	}
}

func FuzzDecodeResources(f *testing.F) {
	for _, s := range resourceSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 1<<16 {
			return
		}
		checkResources(t, body)
	})
}

// vmgate asks PVE for plain answers (no Accept-Encoding: gzip: compressing a large
// answer costs PVE more than the LAN saves), and still reads one PVE gzips anyway.
func TestPlainAnswersAskedGzipRead(t *testing.T) {
	t.Parallel()
	var asked atomic.Value
	srv := newFakePVE(t, func(w http.ResponseWriter, r *http.Request) {
		asked.Store(r.Header.Get("Accept-Encoding"))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		zw.Write([]byte(`{"data":[{"id":"qemu/100","vmid":100,"type":"qemu","node":"pve1","name":"web"}]}`))
		zw.Close()
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	res, err := c.Resources(context.Background(), "vm")
	if err != nil || len(res) != 1 || res[0].Name != "web" || res[0].VMID != 100 {
		t.Fatalf("%+v, %v", res, err)
	}
	if enc, _ := asked.Load().(string); enc != "" {
		t.Fatalf("the request asked for %q", enc)
	}
}
