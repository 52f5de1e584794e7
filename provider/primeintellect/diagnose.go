package primeintellect

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/org/gpuprov/provider"
)

// Diagnose reads GET /pods/{id}: an installation failure, ERROR and STOPPED
// are Critical, provisioning and installing Warn. A pod the API no longer
// knows is looked up in GET /pods/history so its termination is attributed.
// Read-only.
func (p *Provider) Diagnose(ctx context.Context, loc provider.Location, vm, instanceID string) (provider.Diagnosis, error) {
	d := provider.Diagnosis{InstanceID: instanceID}
	var pod wirePod
	err := p.call(ctx, "diagnose", http.MethodGet, "/pods/"+url.PathEscape(instanceID), nil, nil, &pod)
	if isGone(err) {
		return p.fromHistory(ctx, d)
	}
	if err != nil {
		return d, err
	}
	if pod.Name != PodName(vm, p.base.Installation) {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "identity-mismatch",
			Message: fmt.Sprintf("pod %s is not named for VM %s in this installation", instanceID, vm)})
		return d, nil
	}
	d.Status, d.VendorStatus = status(pod.Status, pod.InstallationStatus), pod.Status+"/"+pod.InstallationStatus
	d.Exists = d.Status != provider.StatusTerminated
	switch {
	case pod.InstallationFailure != "" || pod.InstallationStatus == "ERROR":
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "installation-failed",
			Message: "installation failed: " + pod.InstallationFailure})
	case pod.Status == "ERROR" || pod.Status == "STOPPED":
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "status-" + pod.Status,
			Message: fmt.Sprintf("pod is %s", pod.Status)})
	case d.Status == provider.StatusPending:
		msg := fmt.Sprintf("pod is %s, installation %s", pod.Status, pod.InstallationStatus)
		if pod.InstallationProgress != nil {
			msg += fmt.Sprintf(" (%d%%)", *pod.InstallationProgress)
		}
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "installing", Message: msg})
	case d.Status == provider.StatusStopping:
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "status-stopping", Message: "pod is being deleted"})
	case d.Status == provider.StatusRunning && firstString(pod.SSHConnection) == "":
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "no-ssh-endpoint", Message: "pod is active but reports no SSH connection"})
	}
	return d, nil
}

func (p *Provider) fromHistory(ctx context.Context, d provider.Diagnosis) (provider.Diagnosis, error) {
	var h struct {
		Data []wireHistory `json:"data"`
	}
	q := url.Values{"sort_by": {"terminatedAt"}, "sort_order": {"desc"}, "offset": {"0"}, "limit": {strconv.Itoa(pageSize)}}
	if err := p.call(ctx, "diagnose", http.MethodGet, "/pods/history", q, nil, &h); err != nil {
		return d, err
	}
	for _, e := range h.Data {
		if e.ID != d.InstanceID {
			continue
		}
		f := provider.Finding{Severity: provider.Info, Code: "terminated", Message: "pod history: terminated"}
		if t, err := time.Parse(time.RFC3339Nano, e.TerminatedAt); err == nil {
			f.At, f.Message = t, "pod history: terminated at "+e.TerminatedAt
		}
		d.Findings = append(d.Findings, f)
		return d, nil
	}
	d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "gone",
		Message: fmt.Sprintf("Prime Intellect does not know pod %s (never created, or beyond its history)", d.InstanceID)})
	return d, nil
}

// List returns every pod of this installation (name gpuprov-<vm>-<tag>), one
// paged GET /pods/; Observed.VM is parsed from the name. Pods report no
// location, so loc does not filter.
func (p *Provider) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	pods, err := p.listPods(ctx, "list")
	if err != nil {
		return nil, err
	}
	out := []provider.Observed{}
	for _, pod := range pods {
		vm := vmOf(pod.Name, p.base.Installation)
		if vm == "" {
			continue
		}
		if o := observed(pod, vm); o.Status != provider.StatusTerminated {
			out = append(out, o)
		}
	}
	return out, nil
}

// UnknownID returns an id shaped like Prime's (a UUID) that no pod has.
func (p *Provider) UnknownID() string { return "00000000-0000-4000-8000-00000000dead" }
