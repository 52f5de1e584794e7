package lambda

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/org/gpuprov/provider"
)

// Diagnose reads GET /instances/{id}: unhealthy and preempted are Critical,
// booting and terminating Warn. An instance the API no longer knows is
// looked up in the audit log (GET /audit-events, every page) so that a
// termination is attributed with its action and time. Read-only.
func (p *Provider) Diagnose(ctx context.Context, loc provider.Location, vm, instanceID string) (provider.Diagnosis, error) {
	d := provider.Diagnosis{InstanceID: instanceID}
	var out struct {
		Data wireInstance `json:"data"`
	}
	err := p.call(ctx, "diagnose", http.MethodGet, "/instances/"+url.PathEscape(instanceID), nil, nil, &out)
	if isGone(err) {
		return p.diagnoseGone(ctx, d)
	}
	if err != nil {
		return d, err
	}
	in := out.Data
	if in.Name != InstanceName(vm) || in.tag(provider.LabelVM) != vm || in.tag(provider.LabelInstallation) != p.base.Installation {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "identity-mismatch",
			Message: fmt.Sprintf("instance %s does not carry the identity of VM %s in this installation", instanceID, vm)})
		return d, nil
	}
	d.Status, d.VendorStatus = status(in.Status), in.Status
	d.Exists = d.Status != provider.StatusTerminated
	switch in.Status {
	case "preempted":
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "preempted",
			Message: "Lambda preempted the instance"})
	case "unhealthy":
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "unhealthy",
			Message: "Lambda reports the instance unhealthy (a restart may recover it)"})
	case "booting", "terminating":
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "status-" + string(d.Status),
			Message: fmt.Sprintf("instance is %s", in.Status)})
	case "active":
		if in.IP == "" {
			d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "no-ssh-endpoint",
				Message: "instance is active but reports no IP"})
		}
	case "terminated":
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Info, Code: "terminated", Message: "instance is terminated"})
	default:
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "status-unknown",
			Message: fmt.Sprintf("unknown Lambda status %q", in.Status)})
	}
	return d, nil
}

// diagnoseGone attributes a vanished instance from the audit log.
func (p *Provider) diagnoseGone(ctx context.Context, d provider.Diagnosis) (provider.Diagnosis, error) {
	lrn := "lrn:cloud:instance:" + d.InstanceID
	q := url.Values{"resource_type": {"cloud.instance"}}
	var last *wireAuditEvent
	for page := 0; page < 20; page++ {
		// {"data": AuditEventsPage{events, page_token}} (OpenAPI 1.8.3,
		// getAuditEvents).
		var out struct {
			Data struct {
				Events    []wireAuditEvent `json:"events"`
				PageToken *string          `json:"page_token"`
			} `json:"data"`
		}
		if err := p.call(ctx, "diagnose", http.MethodGet, "/audit-events", q, nil, &out); err != nil {
			return d, err
		}
		for i := range out.Data.Events {
			e := &out.Data.Events[i]
			if slices.Contains(e.ResourceLRNs, lrn) || fmt.Sprint(e.AdditionalDetails["instance_lrn"]) == lrn {
				last = e
			}
		}
		if out.Data.PageToken == nil || *out.Data.PageToken == "" {
			break
		}
		q.Set("page_token", *out.Data.PageToken)
	}
	f := provider.Finding{Severity: provider.Critical, Code: "gone",
		Message: fmt.Sprintf("Lambda does not know instance %s (never launched, or terminated)", d.InstanceID)}
	if last != nil {
		f.Severity, f.Code = provider.Info, "terminated"
		if strings.Contains(last.Action, "preempt") {
			f.Severity, f.Code = provider.Critical, "preempted"
		}
		f.Message = fmt.Sprintf("audit log: %s %s", last.ResourceName, last.Action)
		if t, err := time.Parse(time.RFC3339Nano, last.EventTime); err == nil {
			f.At = t
		}
	}
	d.Findings = append(d.Findings, f)
	return d, nil
}

// List returns every instance of this installation (name gpuprov-*, both
// identity tags), in loc's region or, for a zero loc, in the configured
// regions (all when none are configured). One GET /instances.
func (p *Provider) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	ins, err := p.listInstances(ctx, "list")
	if err != nil {
		return nil, err
	}
	out := []provider.Observed{}
	for _, in := range ins {
		vm := in.tag(provider.LabelVM)
		if vm == "" || in.Name != InstanceName(vm) || in.tag(provider.LabelInstallation) != p.base.Installation {
			continue
		}
		if loc.Region != "" && in.Region.Name != loc.Region {
			continue
		}
		if loc.IsZero() && len(p.cfg.Regions) > 0 && !slices.Contains(p.cfg.Regions, in.Region.Name) {
			continue
		}
		if o := observed(in); o.Status != provider.StatusTerminated {
			out = append(out, o)
		}
	}
	return out, nil
}
