package cli

import (
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/client"
)

// NotifyTargetsTable is the table of `vmgate notify target list`; the endpoint,
// free text, last.
func NotifyTargetsTable(list []client.NotifyTarget) TableOf {
	t := TableOf{Header: []string{"ID", "NAME", "KIND", "SECRET", "RATE", "EVENTS", "SEVERITY", "CLUSTERS", "ENDPOINT"},
		Flex: []string{"NAME", "EVENTS", "ENDPOINT"}, WideOnly: []string{"CLUSTERS"}}
	for _, tg := range list {
		events := strings.Join(tg.Filters.Events, ",")
		if events == "" {
			events = "all"
		}
		clusters := make([]string, len(tg.Filters.Clusters))
		for i, c := range tg.Filters.Clusters {
			clusters[i] = strconv.FormatInt(c, 10)
		}
		rate := "-"
		if tg.RatePerMinute > 0 {
			rate = strconv.Itoa(tg.RatePerMinute) + "/min"
		}
		t.Add(tg.ID, tg.Name, tg.Kind, map[bool]string{true: "set", false: "-"}[tg.HasSecret], rate, events,
			orDash(tg.Filters.Severity), orDash(strings.Join(clusters, ",")), tg.Endpoint)
	}
	return t
}

// NotifyDeliveriesTable is the table of `vmgate notify deliveries`; the subject
// and the last error, free text, last.
func NotifyDeliveriesTable(list []client.NotifyDelivery) TableOf {
	t := TableOf{Header: []string{"ID", "AT", "TARGET", "KIND", "STATE", "TRIES", "STATUS", "SUBJECT", "ERROR"},
		Flex: []string{"SUBJECT", "ERROR"}}
	for _, d := range list {
		status := "-"
		if d.LastStatus != 0 {
			status = strconv.Itoa(d.LastStatus)
		}
		t.Add(strconv.FormatInt(d.ID, 10), Stamp(d.At), d.TargetID, d.Kind, d.State, strconv.Itoa(d.Attempts), status,
			d.Subject, orDash(d.LastError))
	}
	return t
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
