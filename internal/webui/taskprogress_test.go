package webui

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/testkit"
	"github.com/vmgate/vmgate/internal/vmops"
)

// TestTaskPageAndStreamAgreeOnPercent: a migration's task page opened half-way
// renders a percent, and the page's stream goes on from there: no value it sends
// is below what the page showed, and they never go down ("Percent never
// decreases over one task", docs/design.md §3.3, for the two readers the
// browser shows one after the other). The emulator's clock moves only when the
// test says, so the page is read in the memory phase however busy the machine.
func TestTaskPageAndStreamAgreeOnPercent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{manualClock: true})
	b := e.browser()
	b.login(opEmail)
	p := b.post("/vms/1/pve1/100/migrate", url.Values{"target": {"pve2"}, "mode": {"online"}}).expect(t, 303)
	taskPath := p.location()
	upid, err := url.PathUnescape(strings.TrimPrefix(taskPath, "/tasks/"))
	if err != nil || !strings.HasPrefix(upid, "UPID:pve1:") {
		t.Fatalf("after migrate: %s", taskPath)
	}

	// PVE's log, read past vmgate's cache, says the VM's memory is being sent.
	testkit.Until(t, "the memory phase in PVE's log", func() bool {
		lg, err := e.vms.TaskLog(t.Context(), vmops.Actor{UserID: e.users[opEmail].ID, Email: opEmail}, upid, 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lg.Lines {
			if strings.Contains(l.T, "migration active, transferred") {
				return true
			}
		}
		e.sim.Advance(time.Second)
		return false
	})
	barNow := regexp.MustCompile(`aria-label="Migration progress"[^>]*aria-valuenow="([0-9.]+)"`)
	var first float64
	var page string
	testkit.Until(t, "the task page showing the memory phase", func() bool {
		page = b.get(taskPath).expect(t, 200).body
		m := barNow.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no progress bar on the task page:\n%s", clip(page, 3000))
		}
		first, _ = strconv.ParseFloat(m[1], 64)
		return first > 0
	})
	if first >= 100 {
		t.Fatalf("the page of a running migration shows %v%%", first)
	}
	events := regexp.MustCompile(`data-events="([^"]*)"`).FindStringSubmatch(page)
	if events == nil || events[1] == "" {
		t.Fatalf("no event stream on the task page:\n%s", clip(page, 3000))
	}

	type result struct {
		tasks []liveTask
		err   error
	}
	opened, done := make(chan struct{}), make(chan result, 1)
	go func() {
		_, tasks, err := readEvents[liveTask](b, strings.ReplaceAll(events[1], "&amp;", "&"), "task", opened)
		done <- result{tasks, err}
	}()
	select {
	case <-opened:
	case r := <-done:
		t.Fatalf("the stream ended before its first event: %v", r.err)
	}
	var r result
	testkit.Until(t, "the stream's end", func() bool {
		select {
		case r = <-done:
			return true
		default:
			e.sim.Advance(time.Second)
			return false
		}
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	seen := []float64{first}
	for _, tk := range r.tasks {
		seen = append(seen, tk.Percent)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			t.Fatalf("the percent went down (the page's first, then the stream's): %v", seen)
		}
	}
	if seen[len(seen)-1] != 100 {
		t.Fatalf("the stream ended at %v", seen)
	}
}
