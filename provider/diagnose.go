package provider

import (
	"context"
	"fmt"
	"time"
)

// Severity ranks a Finding.
type Severity int

const (
	Info Severity = iota
	Warn
	Critical
)

func (s Severity) String() string {
	switch s {
	case Info:
		return "info"
	case Warn:
		return "warn"
	case Critical:
		return "critical"
	}
	return fmt.Sprintf("severity(%d)", int(s))
}

// MarshalText renders the severity by name.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a severity by name (as MarshalText writes it).
func (s *Severity) UnmarshalText(b []byte) error {
	for _, v := range []Severity{Info, Warn, Critical} {
		if v.String() == string(b) {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("provider: unknown severity %q (want info, warn or critical)", b)
}

// Finding is one observation about an instance's health.
type Finding struct {
	Severity Severity  `json:"severity"`
	Code     string    `json:"code"` // stable, machine-readable: "preempted", "boot-failed", ...
	Message  string    `json:"message"`
	At       time.Time `json:"at,omitzero"`
}

// Verdict is the overall health of an instance.
type Verdict string

const (
	Healthy   Verdict = "healthy"
	Degraded  Verdict = "degraded"
	Unhealthy Verdict = "unhealthy"
	Gone      Verdict = "gone"
)

// Diagnosis is a provider's view of one instance.
type Diagnosis struct {
	InstanceID   string         `json:"instance_id"`
	Exists       bool           `json:"exists"` // false: no such instance (terminated or never there)
	Status       InstanceStatus `json:"status,omitempty"`
	VendorStatus string         `json:"vendor_status,omitempty"`
	Findings     []Finding      `json:"findings,omitempty"`
}

// Verdict applies the rule: no instance is Gone; any Critical finding is
// Unhealthy; any Warn finding is Degraded; otherwise Healthy.
func (d Diagnosis) Verdict() Verdict {
	if !d.Exists {
		return Gone
	}
	worst := Info
	for _, f := range d.Findings {
		if f.Severity > worst {
			worst = f.Severity
		}
	}
	switch worst {
	case Critical:
		return Unhealthy
	case Warn:
		return Degraded
	}
	return Healthy
}

// DiagnoseFromObserve gives every provider a health check from Observe alone:
// a missing instance is Gone, Failed and Unknown are Critical, Stopping and
// Pending are Warn.
func DiagnoseFromObserve(ctx context.Context, p CloudProvider, loc Location, vm, instanceID string) (Diagnosis, error) {
	obs, err := p.Observe(ctx, loc, vm)
	if err != nil {
		return Diagnosis{}, err
	}
	d := Diagnosis{InstanceID: instanceID}
	for _, o := range obs {
		if o.ID != instanceID {
			continue
		}
		d.Exists, d.Status, d.VendorStatus = true, o.Status, o.VendorStatus
		switch o.Status {
		case StatusFailed, StatusUnknown:
			d.Findings = append(d.Findings, Finding{Severity: Critical, Code: "status-" + string(o.Status),
				Message: fmt.Sprintf("instance is %s (vendor status %q)", o.Status, o.VendorStatus)})
		case StatusStopping, StatusPending:
			d.Findings = append(d.Findings, Finding{Severity: Warn, Code: "status-" + string(o.Status),
				Message: fmt.Sprintf("instance is %s (vendor status %q)", o.Status, o.VendorStatus)})
		case StatusRunning:
			if o.SSH == nil {
				d.Findings = append(d.Findings, Finding{Severity: Warn, Code: "no-ssh-endpoint",
					Message: "instance runs but reports no SSH endpoint"})
			}
		}
	}
	if !d.Exists {
		d.Findings = append(d.Findings, Finding{Severity: Critical, Code: "gone",
			Message: "no running instance with this id carries the VM's identity"})
	}
	return d, nil
}
