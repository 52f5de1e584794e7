package provider

import (
	"time"
)

// NoticeKind is what an interruption notice announces.
type NoticeKind string

const (
	// NoticePreempt: the cloud takes the instance back (a spot or
	// preemptible instance reclaimed) at Notice.At.
	NoticePreempt NoticeKind = "preempt"
	// NoticeRebalance: the instance is at elevated risk of being
	// reclaimed (AWS's rebalance recommendation); no time is set, and it
	// may never come.
	NoticeRebalance NoticeKind = "rebalance"
	// NoticeMaintenance: the host goes into maintenance that stops the
	// instance (GCP's TERMINATE_ON_HOST_MAINTENANCE, Azure's Reboot,
	// Redeploy or Terminate events).
	NoticeMaintenance NoticeKind = "maintenance"
)

// Notice is a cloud's announcement that an instance is about to be
// interrupted, as the instance's own metadata server (NoticeProbe) or the
// cloud's API (Observed.Notice) says it.
type Notice struct {
	Kind NoticeKind `json:"kind"`
	// At is when the cloud acts, as it said; zero when it did not say (the
	// core then counts the probe's Lead from when it heard).
	At time.Time `json:"at,omitzero"`
	// Detail is the cloud's own words: the action, the event id and type.
	Detail string `json:"detail,omitempty"`
	// Ack is a shell command that tells the cloud the machine is ready for
	// the interruption (Azure Scheduled Events' StartRequests), run on the
	// machine once the caller's hook returned; empty: the cloud takes no
	// acknowledgement.
	Ack string `json:"ack,omitempty"`
}

// NoticeTarget is the instance a probe is for.
type NoticeTarget struct {
	// Name is the VM's name (the instance's name at the cloud, where the
	// adapter names instances after the VM); InstanceID the cloud's id.
	Name, InstanceID string
	Location         Location
	// Spot says the instance is spot or preemptible.
	Spot bool
}

// NoticeProbe is how a machine hears of its own interruption: Command, run
// on it over SSH, prints what the cloud's metadata server says now, and
// Parse reads that. The core runs Command every NoticeEvery in one
// long-lived SSH session per VM (see docs/interruptions.md) and calls Parse
// on each output that differs from the last.
type NoticeProbe struct {
	// Command is a POSIX shell command; it must not fail when nothing is
	// announced (print nothing, or the server's "no event" answer), and
	// must hold no secret (it is run on the machine, as the login user).
	Command string
	// Lead is the notice the cloud documents (AWS: two minutes; GCP: 30
	// seconds unless preemptionNoticeDuration says otherwise; Azure
	// Preempt: at least 30 seconds).
	Lead time.Duration
	// Parse reads one output of Command. No notice and no error: nothing
	// is announced. An error says the output is not what the cloud
	// documents (the core logs it and keeps watching).
	Parse func(out []byte) ([]Notice, error)
}

// NoticeEvery is how often a probe's command runs on the machine: AWS
// advises checking spot/instance-action every five seconds.
const NoticeEvery = 5 * time.Second

// NoticeWatcher is implemented by a provider whose machines hear of their
// interruption from the cloud's metadata server. NoticeProbe returns the
// probe for the target, or false where the cloud announces nothing for it
// (an on-demand instance of a cloud that announces only preemptions).
// Providers whose API says it instead report Observed.Notice from Observe;
// the core watches those by observing.
type NoticeWatcher interface {
	NoticeProbe(t NoticeTarget) (NoticeProbe, bool)
}
