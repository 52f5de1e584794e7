package aws

import (
	"context"
	"fmt"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/org/gpuprov/provider"
)

// stateReasons maps EC2 StateReason codes (API reference: StateReason) to
// a finding. EC2 keeps terminated instances visible for about an hour, so
// Diagnose can say why one went away.
var stateReasons = map[string]struct {
	sev  provider.Severity
	code string
	msg  string
}{
	"Server.SpotInstanceTermination":      {provider.Critical, "preempted", "terminated by the vendor: spot capacity reclaimed"},
	"Server.SpotInstanceShutdown":         {provider.Critical, "preempted", "stopped by the vendor: spot capacity reclaimed"},
	"Server.InsufficientInstanceCapacity": {provider.Critical, "capacity", "the vendor had no capacity to keep or start the instance"},
	"Server.InternalError":                {provider.Critical, "host-error", "an internal error of the vendor ended the instance"},
	"Server.ScheduledStop":                {provider.Critical, "retired", "the vendor stopped the instance for a scheduled retirement"},
	"Client.VolumeLimitExceeded":          {provider.Critical, "quota", "the EBS volume limit was reached"},
	"Client.InternalError":                {provider.Critical, "boot-failed", "the instance failed to start (a client error during launch)"},
	"Client.InvalidSnapshot.NotFound":     {provider.Critical, "boot-failed", "a snapshot of the image is missing"},
	"Client.UserInitiatedShutdown":        {provider.Info, "user", "shut down through the API"},
	"Client.UserInitiatedHibernate":       {provider.Warn, "user", "hibernated through the API"},
	"Client.InstanceInitiatedShutdown":    {provider.Info, "user", "shut down from inside the instance"},
}

// Diagnose reports one instance as EC2 sees it: its state and the reason
// for it (terminated instances too, while EC2 still lists them, so a spot
// reclaim reads "terminated by the vendor: spot capacity reclaimed"), its
// instance and system status checks, and its scheduled events (reboots,
// maintenance, retirement). It never mutates.
func (p *Provider) Diagnose(ctx context.Context, loc provider.Location, vm, instanceID string) (provider.Diagnosis, error) {
	d := provider.Diagnosis{InstanceID: instanceID}
	ins, err := p.describe(ctx, "diagnose", loc.Region, &ec2.DescribeInstancesInput{InstanceIds: []string{instanceID}})
	if IsCode(err, "InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed") || (err == nil && len(ins) == 0) {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "gone",
			Message: fmt.Sprintf("EC2 does not know instance %s (never created, or terminated more than about an hour ago)", instanceID)})
		return d, nil
	}
	if err != nil {
		return d, err
	}
	in := ins[0]
	if tagValue(in.Tags, provider.LabelVM) != vm || tagValue(in.Tags, provider.LabelInstallation) != p.installation {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "identity-mismatch",
			Message: fmt.Sprintf("instance %s does not carry the identity of VM %s in this installation", instanceID, vm)})
		return d, nil
	}
	o := p.observed(loc.Region, in)
	d.Status, d.VendorStatus = o.Status, o.VendorStatus
	d.Exists = o.Status != provider.StatusTerminated
	if r := in.StateReason; r != nil {
		code := awssdk.ToString(r.Code)
		if f, ok := stateReasons[code]; ok {
			d.Findings = append(d.Findings, provider.Finding{Severity: f.sev, Code: f.code,
				Message: fmt.Sprintf("%s (%s: %s)", f.msg, code, awssdk.ToString(r.Message))})
		} else if code != "" && o.Status != provider.StatusRunning && o.Status != provider.StatusPending {
			d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "state-reason",
				Message: fmt.Sprintf("%s: %s", code, awssdk.ToString(r.Message))})
		}
	}
	switch o.Status {
	case provider.StatusTerminated:
		if !hasCritical(d.Findings) && len(d.Findings) == 0 {
			d.Findings = append(d.Findings, provider.Finding{Severity: provider.Info, Code: "terminated", Message: "the instance is terminated"})
		}
		return d, nil
	case provider.StatusFailed:
		if !hasCritical(d.Findings) {
			d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "status-failed",
				Message: fmt.Sprintf("instance is %s", o.VendorStatus)})
		}
	case provider.StatusPending, provider.StatusStopping:
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "status-" + string(o.Status),
			Message: fmt.Sprintf("instance is %s (vendor status %q)", o.Status, o.VendorStatus)})
	case provider.StatusRunning:
		if o.SSH == nil {
			d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "no-ssh-endpoint",
				Message: "instance runs but has no public IP address"})
		}
	}
	var st *ec2.DescribeInstanceStatusOutput
	err = p.call(ctx, "diagnose", func(ctx context.Context) (e error) {
		st, e = p.ec2For(loc.Region).DescribeInstanceStatus(ctx, &ec2.DescribeInstanceStatusInput{
			InstanceIds: []string{instanceID}, IncludeAllInstances: awssdk.Bool(true)})
		return e
	})
	if err != nil {
		return d, err
	}
	for _, s := range st.InstanceStatuses {
		d.Findings = append(d.Findings, statusCheck("instance", s.InstanceStatus)...)
		d.Findings = append(d.Findings, statusCheck("system", s.SystemStatus)...)
		for _, e := range s.Events {
			d.Findings = append(d.Findings, eventFinding(e))
		}
	}
	return d, nil
}

func hasCritical(fs []provider.Finding) bool {
	for _, f := range fs {
		if f.Severity == provider.Critical {
			return true
		}
	}
	return false
}

// statusCheck turns an EC2 status check (ok, impaired, initializing,
// insufficient-data, not-applicable) into findings.
func statusCheck(which string, s *types.InstanceStatusSummary) []provider.Finding {
	if s == nil {
		return nil
	}
	switch s.Status {
	case types.SummaryStatusImpaired:
		return []provider.Finding{{Severity: provider.Critical, Code: which + "-status-impaired",
			Message: fmt.Sprintf("the %s status check fails", which)}}
	case types.SummaryStatusInitializing:
		return []provider.Finding{{Severity: provider.Info, Code: which + "-status-initializing",
			Message: fmt.Sprintf("the %s status check is still initializing", which)}}
	case types.SummaryStatusInsufficientData:
		return []provider.Finding{{Severity: provider.Info, Code: which + "-status-insufficient-data",
			Message: fmt.Sprintf("the %s status check has insufficient data", which)}}
	}
	return nil
}

// eventFinding turns a scheduled event into a finding: Warn while it is
// pending, Info once EC2 marks it "[Completed]" (or "[Canceled]").
func eventFinding(e types.InstanceStatusEvent) provider.Finding {
	desc := awssdk.ToString(e.Description)
	f := provider.Finding{Severity: provider.Warn, Code: "scheduled-" + string(e.Code),
		Message: fmt.Sprintf("scheduled %s: %s", e.Code, desc)}
	if e.NotBefore != nil {
		f.At = *e.NotBefore
	}
	if strings.HasPrefix(desc, "[Completed]") || strings.HasPrefix(desc, "[Canceled]") {
		f.Severity = provider.Info
	}
	return f
}
