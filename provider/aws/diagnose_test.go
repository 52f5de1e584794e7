package aws_test

import (
	"context"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
)

func finding(d provider.Diagnosis, code string) (provider.Finding, bool) {
	for _, f := range d.Findings {
		if f.Code == code {
			return f, true
		}
	}
	return provider.Finding{}, false
}

func TestDiagnose(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	o, id := e.launch(t, l4, newSpec(t, "diag"))
	e.clk.Advance(bootTime)

	d, err := e.p.Diagnose(ctx, o.Location, "diag", id)
	if err != nil || !d.Exists || d.Status != provider.StatusRunning || d.Verdict() != provider.Healthy {
		t.Fatalf("healthy instance diagnosed as %+v, %v", d, err)
	}
	st := e.f.requests("DescribeInstanceStatus")
	if len(st) != 1 || st[0].Form.Get("IncludeAllInstances") != "true" || st[0].Form.Get("InstanceId.1") != id {
		t.Fatalf("DescribeInstanceStatus requests %+v", st)
	}

	e.f.mu.Lock()
	e.f.instances[id].Events = []string{"instance-retirement"}
	e.f.mu.Unlock()
	d, _ = e.p.Diagnose(ctx, o.Location, "diag", id)
	if f, ok := finding(d, "scheduled-instance-retirement"); !ok || f.Severity != provider.Warn || f.At.IsZero() || d.Verdict() != provider.Degraded {
		t.Fatalf("retirement event diagnosed as %+v", d)
	}

	// A spot reclaim: terminated instances stay visible, with their reason.
	e.f.setState(id, "terminated", "Server.SpotInstanceTermination")
	d, err = e.p.Diagnose(ctx, o.Location, "diag", id)
	f, ok := finding(d, "preempted")
	if err != nil || d.Exists || d.Status != provider.StatusTerminated || !ok || f.Severity != provider.Critical ||
		!strings.Contains(f.Message, "terminated by the vendor: spot capacity reclaimed") {
		t.Fatalf("spot reclaim diagnosed as %+v, %v", d, err)
	}

	d, err = e.p.Diagnose(ctx, o.Location, "diag", "i-0fffffffffffffff0")
	if _, ok := finding(d, "gone"); err != nil || d.Exists || !ok || d.Verdict() != provider.Gone {
		t.Fatalf("unknown id diagnosed as %+v, %v", d, err)
	}

	d, _ = e.p.Diagnose(ctx, o.Location, "someone-else", id)
	if _, ok := finding(d, "identity-mismatch"); !ok {
		t.Fatalf("another VM's instance diagnosed as %+v", d)
	}
	for _, r := range e.f.requests("") {
		if !strings.HasPrefix(r.Action, "Describe") && r.Action != "RunInstances" && r.Action != "GetParameter" &&
			r.Action != "CreateSecurityGroup" && r.Action != "AuthorizeSecurityGroupIngress" && r.Action != "ImportKeyPair" {
			t.Fatalf("diagnose mutated: %s", r.Action)
		}
	}
}

func TestDiagnoseStateReasons(t *testing.T) {
	for reason, code := range map[string]string{
		"Server.InsufficientInstanceCapacity": "capacity",
		"Server.InternalError":                "host-error",
		"Server.ScheduledStop":                "retired",
		"Client.VolumeLimitExceeded":          "quota",
	} {
		t.Run(reason, func(t *testing.T) {
			e := newEnv(t, awsConfig())
			o, id := e.launch(t, l4, newSpec(t, "why"))
			e.f.setState(id, "stopped", reason)
			d, err := e.p.Diagnose(context.Background(), o.Location, "why", id)
			if f, ok := finding(d, code); err != nil || !ok || f.Severity != provider.Critical || d.Status != provider.StatusFailed {
				t.Fatalf("%s diagnosed as %+v, %v", reason, d, err)
			}
		})
	}
}
