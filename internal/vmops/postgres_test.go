package vmops

import (
	"net/url"
	"testing"

	"github.com/vmgate/vmgate/internal/faultproxy"
	"github.com/vmgate/vmgate/internal/store/storetest"
)

// postgresThroughProxy gives a test a fresh schema on the test PostgreSQL
// (storetest.FreshSchema: skipped without one, failed under CI) and a DSN that
// reaches it through a fault proxy (without TLS, so the proxy sees PostgreSQL's
// messages).
func postgresThroughProxy(t *testing.T) (*faultproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(storetest.FreshSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(u.Host, faultproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return p, u.String()
}
