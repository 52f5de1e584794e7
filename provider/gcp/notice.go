package gcp

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/org/gpuprov/provider"
)

// metadataBase is where a Compute Engine VM reaches its metadata server.
const metadataBase = "http://metadata.google.internal"

// preemptLead is the notice Compute Engine gives a Spot VM: it sends the
// guest an ACPI soft-off and, "If the VM does not stop after 30 seconds",
// a hard one ("Spot VMs", section "Preemption process",
// https://cloud.google.com/compute/docs/instances/spot).
// Create sets no preemptionNoticeDuration, so it is the default 30 s. A
// maintenance notice comes 60 seconds ahead ("The value of this metadata
// key changes 60 seconds before a maintenance event starts",
// https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice):
// counting 30 s for it too errs early.
const preemptLead = 30 * time.Second

// pollSeconds bounds the long poll of instance/preempted: the core runs
// the probe every provider.NoticeEvery and waits for each run.
const pollSeconds = 4

// NoticeProbe implements provider.NoticeWatcher: the machine reads
// instance/preempted and instance/maintenance-event from its metadata
// server. Every GPU VM gets a probe, Spot or not: Create sets every one to
// TERMINATE on host maintenance, and the maintenance-event key is
// populated for a VM with a GPU attached.
func (p *Provider) NoticeProbe(provider.NoticeTarget) (provider.NoticeProbe, bool) {
	return provider.NoticeProbe{Command: noticeCommand(metadataBase), Lead: preemptLead, Parse: parseNotice}, true
}

var _ provider.NoticeWatcher = (*Provider)(nil)

// The probe's output lines: "<key> <value>", the value empty when the
// metadata server did not answer.
const (
	keyPreempted   = "preempted"
	keyMaintenance = "maintenance-event"
)

// noticeCommand is the probe's shell command for a metadata server at
// base. It reads both keys (each GET bounded to two seconds); when neither
// announces anything, it long-polls instance/preempted with
// wait_for_change=true&timeout_sec=pollSeconds, which returns as soon as
// the value changes (a preemption) or, at the timeout, with the value as
// it is, and reads maintenance-event again. A preemption that begins
// during the poll is printed at once, before the guest's shutdown (which
// the same preemption starts) ends the SSH session. It reads the two keys,
// never the instance/ directory recursively: that listing carries the
// instance's attributes, whose user-data holds the VM's private host key.
// Every request sends Metadata-Flavor: Google, which the metadata server
// requires.
func noticeCommand(base string) string {
	return "u='" + base + "/computeMetadata/v1/instance'\n" +
		"gpuprov_md() { curl -sf --max-time \"$1\" -H 'Metadata-Flavor: Google' \"$u/$2\"; }\n" +
		"p=$(gpuprov_md 2 " + keyPreempted + "); m=$(gpuprov_md 2 " + keyMaintenance + ")\n" +
		"if [ \"$p\" = FALSE ] && [ \"$m\" = NONE ]; then\n" +
		fmt.Sprintf("  p=$(gpuprov_md %d '%s?wait_for_change=true&timeout_sec=%d'); m=$(gpuprov_md 2 %s)\n",
			pollSeconds+2, keyPreempted, pollSeconds, keyMaintenance) +
		"fi\n" +
		"printf '" + keyPreempted + " %s\\n" + keyMaintenance + " %s\\n' \"$p\" \"$m\""
}

// parseNotice reads one output of noticeCommand.
//
// instance/preempted is "TRUE" once Compute Engine preempts the VM,
// "FALSE" otherwise ("Create and use Spot VMs", section "Detect
// preemption", https://cloud.google.com/compute/docs/instances/create-use-spot,
// and its older twin for preemptible VMs,
// https://cloud.google.com/compute/docs/instances/create-use-preemptible):
// TRUE becomes a NoticePreempt without a time.
//
// instance/maintenance-event is NONE, MIGRATE_ON_HOST_MAINTENANCE or
// TERMINATE_ON_HOST_MAINTENANCE
// (https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice):
// TERMINATE_ON_HOST_MAINTENANCE becomes a NoticeMaintenance without a
// time. MIGRATE_ON_HOST_MAINTENANCE announces a live migration, which
// stops nothing (a GPU VM is never migrated: Create sets TERMINATE).
//
// A key without an answer, another value, or a missing or unknown line
// is an error; a notice read from one key is returned beside the error of
// the other.
func parseNotice(out []byte) ([]provider.Notice, error) {
	var notices []provider.Notice
	var errs []error
	seen := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		line = strings.TrimRight(line, "\r\n")
		if strings.TrimSpace(line) == "" {
			continue
		}
		key, value, _ := strings.Cut(line, " ")
		value = strings.TrimSpace(value)
		if key != keyPreempted && key != keyMaintenance {
			errs = append(errs, fmt.Errorf("gcp notice: unexpected line %q", line))
			continue
		}
		if seen[key] {
			errs = append(errs, fmt.Errorf("gcp notice: %s twice", key))
			continue
		}
		seen[key] = true
		if value == "" {
			errs = append(errs, fmt.Errorf("gcp notice: the metadata server did not answer for instance/%s", key))
			continue
		}
		switch {
		case key == keyPreempted && value == "TRUE":
			notices = append(notices, provider.Notice{Kind: provider.NoticePreempt, Detail: "instance/preempted TRUE"})
		case key == keyPreempted && value == "FALSE":
		case key == keyMaintenance && value == "TERMINATE_ON_HOST_MAINTENANCE":
			notices = append(notices, provider.Notice{Kind: provider.NoticeMaintenance, Detail: "instance/maintenance-event " + value})
		case key == keyMaintenance && (value == "NONE" || value == "MIGRATE_ON_HOST_MAINTENANCE"):
		default:
			errs = append(errs, fmt.Errorf("gcp notice: instance/%s is %q, not a documented value", key, value))
		}
	}
	for _, k := range []string{keyPreempted, keyMaintenance} {
		if !seen[k] {
			errs = append(errs, fmt.Errorf("gcp notice: no %s line in the probe's output", k))
		}
	}
	return notices, errors.Join(errs...)
}
