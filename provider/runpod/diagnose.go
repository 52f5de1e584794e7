package runpod

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/org/gpuprov/provider"
)

// Diagnose reads GET /pods/{id}: ERROR and EXITED (a stopped or interrupted
// pod) are Critical, provisioning and a RUNNING pod without its SSH port
// mapped are Warn. RunPod keeps no readable record of a terminated pod, so a
// 404 is reported Gone. Read-only.
func (p *Provider) Diagnose(ctx context.Context, loc provider.Location, vm, instanceID string) (provider.Diagnosis, error) {
	d := provider.Diagnosis{InstanceID: instanceID}
	var pod wirePod
	err := p.call(ctx, "diagnose", http.MethodGet, "/pods/"+url.PathEscape(instanceID), nil, nil, &pod)
	if isGone(err) {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "gone",
			Message: fmt.Sprintf("RunPod does not know pod %s (never created, or terminated)", instanceID)})
		return d, nil
	}
	if err != nil {
		return d, err
	}
	if pod.Name != provider.ResourceName(vm) || pod.Env[EnvVM] != vm || pod.Env[EnvInstallation] != p.base.Installation {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "identity-mismatch",
			Message: fmt.Sprintf("pod %s does not carry the identity of VM %s in this installation", instanceID, vm)})
		return d, nil
	}
	d.Status, d.VendorStatus = status(pod), pod.Status
	d.Exists = d.Status != provider.StatusTerminated
	switch {
	case pod.Status == "ERROR":
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "container-error",
			Message: "the pod's container is in an unrecoverable error state"})
	case pod.Status == "EXITED":
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "exited",
			Message: "the pod's container exited (stopped, or its host reclaimed it)"})
	case pod.Status == "RUNNING" && d.Status == provider.StatusPending:
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "no-ssh-endpoint",
			Message: "the pod runs but 22/tcp has no public port yet"})
	case d.Status == provider.StatusPending:
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "status-pending",
			Message: fmt.Sprintf("pod is %s", pod.Status)})
	case d.Status == provider.StatusUnknown:
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "status-unknown",
			Message: fmt.Sprintf("unknown RunPod status %q", pod.Status)})
	}
	return d, nil
}

// List returns every pod of this installation (name gpuprov-*, identity in
// its environment), one GET /pods; in loc's data center when loc names one,
// else in the configured regions when set.
func (p *Provider) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	pods, err := p.listPods(ctx, "list")
	if err != nil {
		return nil, err
	}
	out := []provider.Observed{}
	for _, pod := range pods {
		vm := pod.Env[EnvVM]
		if vm == "" || pod.Name != provider.ResourceName(vm) || pod.Env[EnvInstallation] != p.base.Installation {
			continue
		}
		if loc.Region != "" && pod.DataCenterID != loc.Region {
			continue
		}
		if loc.IsZero() && len(p.cfg.Regions) > 0 && !containsString(p.cfg.Regions, pod.DataCenterID) {
			continue
		}
		if o := observed(pod); o.Status != provider.StatusTerminated {
			out = append(out, o)
		}
	}
	return out, nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// UnknownID returns an id shaped like RunPod's that no pod has.
func (p *Provider) UnknownID() string { return "zzzzdeadpod00" }
