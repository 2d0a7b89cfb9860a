package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
)

// StaleAfter is how long a read waits for PVE when vmgate holds a snapshot it may
// answer with instead (issue 10 (docs/history.md): reads during outages). Without a snapshot a read
// waits as long as the request may.
const StaleAfter = 2 * time.Second

// Stale reports whether err says PVE could not be asked now (no endpoint answers,
// the node is cut off, or PVE did not answer in time): a read may then answer
// with the last snapshot it has, marked stale. The store failing, a refusal or a
// "not there" are not such errors.
func Stale(err error) bool {
	e, ok := errs.As(err)
	if !ok {
		return false
	}
	switch e.Kind {
	case errs.Timeout:
		return true
	case errs.Unavailable:
		return e.ReasonOrDefault() == errs.Unavailable.String()
	}
	return false
}

// maxKnownVMs bounds the VM statuses remembered for stale answers; past it an
// arbitrary one is forgotten, which only costs that VM its stale answer.
const maxKnownVMs = 10000

type knownVMKey struct {
	cluster int64
	node    string
	kind    pve.GuestKind // a VM's status never answers for a container
	vmid    int64
}

type knownVM struct {
	view VMStatusView
	at   time.Time
}

// lastKnownVMs remembers each VM's last status read from PVE, so that a status
// query while its node is cut off answers what vmgate last saw, marked stale,
// rather than an error.
type lastKnownVMs struct {
	mu sync.Mutex
	m  map[knownVMKey]knownVM
}

func (l *lastKnownVMs) get(k knownVMKey) (knownVM, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.m[k]
	return v, ok
}

func (l *lastKnownVMs) put(k knownVMKey, v VMStatusView, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[knownVMKey]knownVM{}
	}
	if _, ok := l.m[k]; !ok && len(l.m) >= maxKnownVMs {
		for old := range l.m {
			delete(l.m, old)
			break
		}
	}
	l.m[k] = knownVM{view: v, at: at}
}

// withSnapshot runs read; when vmgate has a snapshot (have), it waits for PVE at
// most StaleAfter and answers a read that PVE could not serve with the snapshot,
// marked stale. A fresh answer replaces the snapshot.
func (s *Service) vmStatusOrStale(ctx context.Context, k knownVMKey, read func(context.Context) (VMStatusView, error)) (VMStatusView, error) {
	known, have := s.lastVM.get(k)
	rctx := ctx
	if have {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, StaleAfter)
		defer cancel()
	}
	v, err := read(rctx)
	if err == nil {
		s.lastVM.put(k, v, s.now())
		return v, nil
	}
	if have && ctx.Err() == nil && (Stale(err) || rctx.Err() != nil) {
		out := known.view
		out.Stale, out.StaleSince = true, known.at
		return out, nil
	}
	return VMStatusView{}, err
}
