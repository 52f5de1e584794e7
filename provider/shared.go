package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// SharedCleaner is implemented by a provider whose Prepare puts a side
// resource in one place for every VM of the installation in a region that
// opens the same ports (a firewall, a security group), instead of one per
// VM: at a thousand VMs, per-VM firewalls cost as many API calls as the
// machines themselves.
//
// The contract for such a shared resource:
//
//   - It is named with [SharedName] and labelled with the installation and
//     [LabelShared], never with a VM. Prepare makes it or adopts it and may
//     remember that it did, so that the next Prepare in the region makes no
//     call at all.
//   - Cleanup never touches it; Cleanup removes only what is the VM's own
//     (its SSH key, a per-VM rule).
//   - CleanupShared removes the installation's shared resources in loc's
//     region (every region for a zero Location) that no instance uses. The
//     core calls it once none of its own VMs has held an attempt in that
//     provider and region for a grace (gpuprov.WithSharedGrace), at Close
//     for the regions still in their grace, and Sweep calls it for every
//     region. What an instance still uses is left, and reported with an
//     error matching [ErrInUse]; CleanupShared must never remove a resource
//     a non-terminated instance uses, so a provider implements it only on a
//     cloud that refuses to delete a resource in use (EC2's
//     DependencyViolation, the sim's 409) or that it can check atomically.
//   - A Create that finds a shared resource gone (another process removed it
//     between this VM's Prepare and its Create) forgets what Prepare
//     remembered and returns an error matching [ErrSharedGone]: the core
//     runs Prepare again and sends the create again, as for a lost answer.
type SharedCleaner interface {
	CleanupShared(ctx context.Context, loc Location) error
}

// ErrSharedGone is matched (errors.Is) by a Create error that says a
// shared side resource the prepared data names no longer exists. Such an
// error must be Transient; the create did not land.
var ErrSharedGone = errors.New("shared side resource gone")

// LabelShared marks a side resource shared by the VMs of an installation
// (see SharedCleaner); its value is "true".
const LabelShared = "gpuprov-shared"

// SharedName is the name of the installation's shared side resource that
// opens ports to sources: gpuprov-fw-<12 hex digits of a hash of the
// installation, the port set and the source set>. Ports and sources are
// compared as sets, protocols in any case, so two VMs asking for the same
// ports in another order or spelling share one resource; VMs that admit
// other sources get another. Sources that are DefaultSourceRanges (or
// none) name the resource as before sources could be chosen, so a
// resource made by an earlier version is adopted. At most 28 characters,
// valid for every cloud's names (lowercase letters, digits and '-').
func SharedName(installation string, ports []Port, sources []string) string {
	set := make([]string, 0, len(ports))
	for _, p := range ports {
		p.Protocol = strings.ToLower(p.Protocol)
		set = append(set, p.String())
	}
	slices.Sort(set)
	set = slices.Compact(set)
	key := fmt.Sprintf("%s\x00%s", installation, strings.Join(set, ","))
	if src := normalSources(sources); !slices.Equal(src, DefaultSourceRanges) {
		key += "\x00" + strings.Join(src, ",")
	}
	sum := sha256.Sum256([]byte(key))
	return "gpuprov-fw-" + hex.EncodeToString(sum[:6])
}

// SharedLabels returns the labels of the installation's shared side
// resources: the installation and LabelShared. A caller's labels are a
// VM's, so a resource many VMs share carries none of them.
func SharedLabels(installation string) map[string]string {
	return map[string]string{LabelInstallation: installation, LabelShared: "true"}
}

// RequestPacer is implemented by a provider that paces each API request it
// sends with the core's pacer, instead of the core pacing each primitive
// as one call (a Prepare that makes three requests, or none because it
// adopts a shared firewall it remembers, is then paced as what it sends).
// The core calls UsePacer once, before any other call (whether or not the
// account has a rate, Capabilities.RequestsPerSecond); the provider must
// then call wait, with the context of the primitive call it serves, before
// every request, and give up the request when wait fails. Besides pacing,
// wait is where the core journals what must be durable before a request
// goes out (a new attempt, before its Prepare's first request): a request
// sent without it may be one the journal cannot account for after a
// crash.
//
// The core's pacer is the account's token bucket, paused while a
// Retry-After runs. Its queue lets listings (which serve every VM polling
// a location) go first, and lets a request still waiting for its turn on
// an offer that another VM just found stocked out leave the queue: wait
// then returns a Capacity error and the VM plans again.
type RequestPacer interface {
	UsePacer(wait func(ctx context.Context) error)
}
