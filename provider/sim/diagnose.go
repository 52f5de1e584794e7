package sim

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/org/gpuprov/provider"
)

// Diagnose reads one instance, terminated ones included while the cloud
// retains them, and turns its history into findings: a preemption and a
// boot failure are Critical, with the cloud's own message. It never
// mutates.
func (p *Provider) Diagnose(ctx context.Context, loc provider.Location, vm, instanceID string) (provider.Diagnosis, error) {
	d := provider.Diagnosis{InstanceID: instanceID}
	var in wireInstance
	err := p.do(ctx, call{op: "diagnose", method: http.MethodGet, path: "instances/" + url.PathEscape(instanceID), out: &in})
	if isNotFound(err) {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "gone",
			Message: fmt.Sprintf("the cloud does not know instance %s (never created, or terminated beyond its retention)", instanceID)})
		return d, nil
	}
	if err != nil {
		return d, err
	}
	if in.Labels[provider.LabelVM] != vm || in.Labels[provider.LabelInstallation] != p.installation {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "identity-mismatch",
			Message: fmt.Sprintf("instance %s does not carry the identity of VM %s in this installation", instanceID, vm)})
		return d, nil
	}
	d.Status, d.VendorStatus = status(in.Status), in.Status
	d.Exists = d.Status != provider.StatusTerminated
	for _, e := range in.Events {
		switch e.Type {
		case "preempted":
			d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "preempted", Message: e.Message, At: e.At})
		case "boot_failed":
			d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "boot-failed", Message: e.Message, At: e.At})
		}
	}
	switch d.Status {
	case provider.StatusTerminated:
		if !slices.ContainsFunc(d.Findings, func(f provider.Finding) bool { return f.Severity == provider.Critical }) {
			d.Findings = append(d.Findings, provider.Finding{Severity: provider.Info, Code: "terminated", Message: in.StatusMessage, At: in.TerminatedAt})
		}
	case provider.StatusPending, provider.StatusStopping:
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "status-" + string(d.Status),
			Message: fmt.Sprintf("instance is %s (vendor status %q)", d.Status, in.Status)})
	case provider.StatusRunning:
		if in.SSH == nil {
			d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "no-ssh-endpoint",
				Message: "instance runs but reports no SSH endpoint"})
		}
	case provider.StatusFailed:
		if len(d.Findings) == 0 {
			d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "status-failed", Message: in.StatusMessage})
		}
	}
	return d, nil
}

// List returns every instance of this installation that is not terminated,
// in loc, or in every configured region when loc is zero (one call, all
// pages). Observed.VM is the instance's gpuprov label.
func (p *Provider) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	q := url.Values{"label": {provider.LabelInstallation + "=" + p.installation}}
	return p.listOf(ctx, loc, q, nil)
}

// ListNamed is List of the instances whose gpuprov label is one of vms:
// GET instances with a label_any filter of their names, which the server
// answers from its label index, so the answer and its cost follow vms.
// The answer is filtered again here, so a server that ignores label_any
// (one older than it) makes a larger answer, never a wrong one.
func (p *Provider) ListNamed(ctx context.Context, loc provider.Location, vms []string) ([]provider.Observed, error) {
	if len(vms) == 0 {
		return []provider.Observed{}, nil
	}
	q := url.Values{"label": {provider.LabelInstallation + "=" + p.installation}}
	names := make(map[string]bool, len(vms))
	for _, vm := range vms {
		q.Add("label_any", provider.LabelVM+"="+vm)
		names[vm] = true
	}
	return p.listOf(ctx, loc, q, names)
}

// listOf lists with q in loc and keeps the instances of this installation
// that carry a VM identity (one of names, unless names is nil), in the
// configured regions when loc is zero.
func (p *Provider) listOf(ctx context.Context, loc provider.Location, q url.Values, names map[string]bool) ([]provider.Observed, error) {
	ins, err := p.list(ctx, "list", loc, q)
	if err != nil {
		return nil, err
	}
	out := make([]provider.Observed, 0, len(ins))
	for _, in := range ins {
		vm := in.Labels[provider.LabelVM]
		if in.Labels[provider.LabelInstallation] != p.installation || vm == "" || (names != nil && !names[vm]) {
			continue
		}
		if loc.IsZero() && len(p.cfg.Regions) > 0 && !slices.Contains(p.cfg.Regions, in.Region) {
			continue
		}
		out = append(out, observed(in))
	}
	return out, nil
}
