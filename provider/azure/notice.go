package azure

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/org/gpuprov/provider"
)

// imdsBase is where an Azure VM reaches its Instance Metadata Service.
const imdsBase = "http://169.254.169.254"

// scheduledEventsPath is the Scheduled Events endpoint at the API version
// whose document the probe parses ("the current version is 2020-07-01",
// https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events,
// "Version and region availability").
const scheduledEventsPath = "/metadata/scheduledevents?api-version=2020-07-01"

// preemptLead is Scheduled Events' minimum notice of a Preempt event:
// "Preempt | 30 seconds" (same page, "Event scheduling"). The others come
// earlier (Reboot 15 minutes, Redeploy 10, Terminate 5 to 15 as
// configured) and carry their time (NotBefore) anyway.
const preemptLead = 30 * time.Second

// NoticeProbe implements provider.NoticeWatcher: the machine reads its
// Scheduled Events, and the probe's Parse keeps the events whose Resources
// name this VM (Scheduled Events are delivered to every VM of an
// availability set or scale-set placement group: "check the Resources
// field in the event to identify which VMs are affected"). Every VM gets a
// probe, Spot or not: a Reboot, Redeploy or Terminate is announced to all.
// The VM's Azure name is the last segment of the target's instance id (a
// VM resource id of this subscription, as Observe reports it); a target
// without one is matched by the name Create gives: gpuprov-<vm>-<attempt>.
func (p *Provider) NoticeProbe(t provider.NoticeTarget) (provider.NoticeProbe, bool) {
	var ours func(string) bool
	if _, name, err := p.parseVMID(t.InstanceID); err == nil {
		ours = func(r string) bool { return strings.EqualFold(r, name) }
	} else if t.Name != "" {
		prefix := provider.ResourceName(t.Name) + "-"
		ours = func(r string) bool {
			if len(r) <= len(prefix) || !strings.EqualFold(r[:len(prefix)], prefix) {
				return false
			}
			_, err := strconv.Atoi(r[len(prefix):])
			return err == nil
		}
	} else {
		return provider.NoticeProbe{}, false
	}
	return provider.NoticeProbe{
		Command: noticeCommand(imdsBase),
		Lead:    preemptLead,
		Parse:   func(out []byte) ([]provider.Notice, error) { return parseScheduledEvents(out, ours, imdsBase) },
	}, true
}

var _ provider.NoticeWatcher = (*Provider)(nil)

// noticeMarker starts the line the command prints when Scheduled Events
// gave no document (curl's exit status follows).
const noticeMarker = "gpuprov-no-answer"

// noticeCommand is the probe's shell command for an IMDS at base: one GET
// of Scheduled Events with the header Metadata: true, which "is required
// for all scheduled events requests" (same page, "Headers"); --fail keeps
// an error page out, and a failure prints noticeMarker instead. The first
// request of a VM enables the service and may take "up to two minutes"
// (same page, "Enabling and disabling Scheduled Events"), hence the long
// bound; later ones answer at once.
func noticeCommand(base string) string {
	return "curl -sf --max-time 120 -H 'Metadata: true' '" + base + scheduledEventsPath + "' || printf '" + noticeMarker + " %s\\n' \"$?\""
}

// ackCommand is the documented approval of event id ("Start an event"):
// POST {"StartRequests": [{"EventId": id}]} to the same endpoint, with
// Metadata: true. id must match eventIDRE: it goes into a shell command.
func ackCommand(base, id string) string {
	return "curl -sf --max-time 10 -H 'Metadata: true' -X POST -d '{\"StartRequests\":[{\"EventId\":\"" + id + "\"}]}' '" + base + scheduledEventsPath + "'"
}

// eventIDRE is a GUID, the documented form of EventId ("Globally unique
// identifier for this event", e.g. 602d9444-d2cd-49c7-8624-8643e7171297;
// the documented samples use both cases).
var eventIDRE = regexp.MustCompile(`^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$`)

// scheduledEvents is the document of api-version 2020-07-01 (same page,
// "Query for events" and "Event properties"). DocumentIncarnation and
// Events are always there: "An empty array means that currently no events
// are scheduled".
type scheduledEvents struct {
	DocumentIncarnation *int64            `json:"DocumentIncarnation"`
	Events              *[]scheduledEvent `json:"Events"`
}

type scheduledEvent struct {
	EventID           string   `json:"EventId"`
	EventType         string   `json:"EventType"` // Freeze, Reboot, Redeploy, Preempt, Terminate
	ResourceType      string   `json:"ResourceType"`
	Resources         []string `json:"Resources"`
	EventStatus       string   `json:"EventStatus"` // Scheduled, Started
	NotBefore         string   `json:"NotBefore"`   // "Mon, 19 Sep 2016 18:29:47 GMT"; blank once Started
	Description       string   `json:"Description"`
	EventSource       string   `json:"EventSource"` // Platform, User
	DurationInSeconds int64    `json:"DurationInSeconds"`
}

// eventKinds maps each documented EventType to the notice it is: Preempt
// ("The Spot Virtual Machine is being deleted") a preemption; Reboot,
// Redeploy ("scheduled to move to another node") and Terminate ("scheduled
// to be deleted") stop the VM; Freeze ("pause for a few seconds ... no
// impact on memory or open files") interrupts nothing.
var eventKinds = map[string]provider.NoticeKind{
	"Preempt":   provider.NoticePreempt,
	"Reboot":    provider.NoticeMaintenance,
	"Redeploy":  provider.NoticeMaintenance,
	"Terminate": provider.NoticeMaintenance,
	"Freeze":    "",
}

// parseScheduledEvents reads one output of noticeCommand: a notice for
// each event of a documented interrupting type whose Resources name this
// VM (ours). At is NotBefore (zero when blank: the event started); Ack
// approves the event, for a Scheduled event whose Resources name this VM
// alone: approving "allows the event to proceed for all Resources in the
// event", and the probe must not hasten another VM's. An event of this VM
// with an EventId that is not a GUID, an undocumented EventType, or a
// document that is not the documented JSON is an error; the other events'
// notices are returned beside it.
func parseScheduledEvents(out []byte, ours func(string) bool, base string) ([]provider.Notice, error) {
	text := strings.TrimSpace(string(out))
	if rest, ok := strings.CutPrefix(text, noticeMarker); ok {
		return nil, fmt.Errorf("azure notice: Scheduled Events gave no document (curl exit status%s)", rest)
	}
	var doc scheduledEvents
	if err := json.Unmarshal([]byte(text), &doc); err != nil {
		return nil, fmt.Errorf("azure notice: the Scheduled Events answer is not its documented JSON: %w", err)
	}
	if doc.DocumentIncarnation == nil || doc.Events == nil {
		return nil, errors.New("azure notice: the Scheduled Events answer has no DocumentIncarnation or Events")
	}
	var notices []provider.Notice
	var errs []error
	for _, e := range *doc.Events {
		if !slices.ContainsFunc(e.Resources, ours) {
			continue
		}
		kind, known := eventKinds[e.EventType]
		switch {
		case !known:
			errs = append(errs, fmt.Errorf("azure notice: event %q has EventType %q, not a documented one", e.EventID, e.EventType))
			continue
		case kind == "":
			continue
		case !eventIDRE.MatchString(e.EventID):
			errs = append(errs, fmt.Errorf("azure notice: %s event's EventId %q is not a GUID", e.EventType, e.EventID))
			continue
		}
		n := provider.Notice{Kind: kind, Detail: fmt.Sprintf("%s %s (%s, %s)", e.EventType, e.EventID, e.EventStatus, e.EventSource)}
		if e.Description != "" {
			n.Detail += ": " + e.Description
		}
		if e.NotBefore != "" {
			at, err := time.Parse(time.RFC1123, e.NotBefore)
			if err != nil {
				errs = append(errs, fmt.Errorf("azure notice: %s event %s NotBefore %q: %w", e.EventType, e.EventID, e.NotBefore, err))
			} else {
				n.At = at.UTC()
			}
		}
		if e.EventStatus == "Scheduled" && !slices.ContainsFunc(e.Resources, func(r string) bool { return !ours(r) }) {
			n.Ack = ackCommand(base, e.EventID)
		}
		notices = append(notices, n)
	}
	return notices, errors.Join(errs...)
}
