package lambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/lambda"
	"github.com/org/gpuprov/provider/lambda/lambdamock"
)

func TestPlanUsesCapacityAndCanonicalNames(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	offers := e.offers(t)
	// gpu_8x has no region with capacity and the wrong count; rtx6000 is not
	// in the canonical table; us-east-1 is the cheapest region with capacity.
	var got []string
	for _, o := range offers {
		if o.GPU != "H100-80GB" || o.GPUMemoryGB != 80 || o.Spot {
			t.Fatalf("offer %+v", o)
		}
		got = append(got, o.InstanceType+"@"+o.Location.Region)
	}
	want := []string{"gpu_1x_h100_pcie@us-east-1", "gpu_1x_h100_sxm5@us-south-1", "gpu_1x_h100_sxm5@us-west-3"}
	if !slices.Equal(got, want) {
		t.Fatalf("offers %v, want %v", got, want)
	}
	if offers[0].PricePerHour != 2.49 {
		t.Fatalf("price %v, want 2.49", offers[0].PricePerHour)
	}
	var d map[string]string
	if err := json.Unmarshal(offers[0].Detail, &d); err != nil || d["instance_type"] != "gpu_1x_h100_pcie" || d["region"] != "us-east-1" {
		t.Fatalf("detail %s", offers[0].Detail)
	}
	calls := e.api.Calls(http.MethodGet, "/instance-types")
	if len(calls) != 1 || calls[0].Auth != "Bearer "+apiKey {
		t.Fatalf("calls %+v", calls)
	}
	// Configured regions limit the plan.
	e2 := newEnv(t, lambda.Config{Regions: []string{"us-west-3"}})
	offers = e2.offers(t)
	if len(offers) != 1 || offers[0].Location.Region != "us-west-3" {
		t.Fatalf("regions filter: %+v", offers)
	}
}

func TestPrepareRegistersKeyAndRulesetOnce(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	o := e.offer(t)
	s := spec("train")
	for range 2 {
		if _, err := e.p.Prepare(context.Background(), &o, s); err != nil {
			t.Fatal(err)
		}
	}
	name := lambda.SideName("train", installation)
	if got := e.api.SSHKeys(); !slices.Equal(got, []string{name}) {
		t.Fatalf("keys %v, want [%s]", got, name)
	}
	// The ruleset is the installation's for these ports, not the VM's.
	shared := provider.SharedName(installation, s.OpenPorts, nil)
	if got := e.api.Rulesets(); !slices.Equal(got, []string{shared}) {
		t.Fatalf("rulesets %v, want [%s]", got, shared)
	}
	posts := e.api.Calls(http.MethodPost, "/firewall-rulesets")
	if len(posts) != 1 {
		t.Fatalf("%d ruleset creates, want 1", len(posts))
	}
	if n := len(e.api.Calls(http.MethodGet, "/firewall-rulesets")); n != 1 {
		t.Fatalf("%d ruleset listings, want 1: the second Prepare knows the ruleset", n)
	}
	var rs struct {
		Name, Region string
		Rules        []struct {
			Protocol      string
			PortRange     []int  `json:"port_range"`
			SourceNetwork string `json:"source_network"`
		}
	}
	if err := json.Unmarshal(posts[0].Body, &rs); err != nil {
		t.Fatal(err)
	}
	if rs.Region != "us-east-1" || len(rs.Rules) != 2 || rs.Rules[0].PortRange[0] != 22 || rs.Rules[1].PortRange[0] != 6443 || rs.Rules[0].SourceNetwork != "0.0.0.0/0" {
		t.Fatalf("ruleset body %s", posts[0].Body)
	}
	if calls := e.api.Calls(http.MethodPut, "/firewall-rules"); len(calls) != 0 {
		t.Fatal("Prepare touched the account-wide firewall rules")
	}
	// No authorized key: Lambda cannot launch.
	_, err := e.p.Prepare(context.Background(), &o, &provider.InstanceSpec{VM: "x", Installation: installation})
	kindOf(t, err, provider.InvalidRequest)
}

func TestCreateSendsIdentityUserDataKeyAndRuleset(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	_, id := e.launch(t, spec("train"))
	launches := e.api.Calls(http.MethodPost, "/instance-operations/launch")
	if len(launches) != 1 {
		t.Fatalf("%d launches", len(launches))
	}
	var in struct {
		RegionName       string   `json:"region_name"`
		InstanceTypeName string   `json:"instance_type_name"`
		SSHKeyNames      []string `json:"ssh_key_names"`
		Name             string
		UserData         string `json:"user_data"`
		Tags             []struct{ Key, Value string }
		FirewallRulesets []struct{ ID string } `json:"firewall_rulesets"`
	}
	if err := json.Unmarshal(launches[0].Body, &in); err != nil {
		t.Fatal(err)
	}
	if in.Name != "gpuprov-train" || in.RegionName != "us-east-1" || in.InstanceTypeName != "gpu_1x_h100_pcie" {
		t.Fatalf("launch %s", launches[0].Body)
	}
	if !slices.Equal(in.SSHKeyNames, []string{lambda.SideName("train", installation)}) || len(in.FirewallRulesets) != 1 {
		t.Fatalf("key/ruleset %s", launches[0].Body)
	}
	tags := map[string]string{}
	for _, tg := range in.Tags {
		tags[tg.Key] = tg.Value
	}
	if tags[provider.LabelVM] != "train" || tags[provider.LabelInstallation] != installation {
		t.Fatalf("tags %v", tags)
	}
	if !strings.Contains(in.UserData, "#cloud-config") || !strings.Contains(in.UserData, "HOSTKEYSECRET") || !strings.Contains(in.UserData, "ssh_authorized_keys") {
		t.Fatalf("user data %q", in.UserData)
	}
	if strings.Contains(e.Logs.String(), "HOSTKEYSECRET") {
		t.Fatal("the host key's private half was logged")
	}
	// A replayed create adopts the instance instead of launching again.
	o := e.offer(t)
	prep, _ := e.p.Prepare(context.Background(), &o, spec("train"))
	e.now = e.now.Add(time.Minute)
	again, err := e.p.Create(context.Background(), &o, prep, spec("train"))
	if err != nil || again != id {
		t.Fatalf("replayed create: %q %v, want adoption of %s", again, err, id)
	}
	if n := len(e.api.Calls(http.MethodPost, "/instance-operations/launch")); n != 1 {
		t.Fatalf("%d launches after a replay, want 1", n)
	}
}

func TestCreateIsPacedAtTheLaunchInterval(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	e.launch(t, spec("a"))
	o := e.offer(t)
	prep, _ := e.p.Prepare(context.Background(), &o, spec("b"))
	e.now = e.now.Add(5 * time.Second)
	_, err := e.p.Create(context.Background(), &o, prep, spec("b"))
	pe := kindOf(t, err, provider.Transient)
	if pe.RetryAfter != 7*time.Second {
		t.Fatalf("retry after %s, want 7s", pe.RetryAfter)
	}
	if n := len(e.api.Calls(http.MethodPost, "/instance-operations/launch")); n != 1 {
		t.Fatalf("a paced create sent a launch (%d launches)", n)
	}
	e.now = e.now.Add(7 * time.Second)
	if _, err := e.p.Create(context.Background(), &o, prep, spec("b")); err != nil {
		t.Fatal(err)
	}
}

func TestCreateErrors(t *testing.T) {
	for _, tc := range []struct {
		fault lambdamock.Fault
		kind  provider.ErrorKind
		scope provider.Scope
		after time.Duration
	}{
		{lambdamock.Fault{Status: 400, Code: lambda.CodeInsufficientCapacity, Message: "Not enough capacity to fulfill launch request."}, provider.Capacity, provider.ScopeOffer, 0},
		// testdata/openapi.json, ApiErrorQuotaExceeded (launch 400): names
		// no scope, so the offer.
		{lambdamock.Fault{Status: 400, Code: lambda.CodeQuotaExceeded, Message: "Quota exceeded."}, provider.Quota, provider.ScopeOffer, 0},
		{lambdamock.Fault{Status: 401, Code: lambda.CodeInvalidAPIKey, Message: "API key was invalid"}, provider.Credentials, provider.ScopeProvider, 0},
		{lambdamock.Fault{Status: 400, Code: lambda.CodeInvalidParameters, Message: "Invalid request data."}, provider.InvalidRequest, provider.ScopeOffer, 0},
		{lambdamock.Fault{Status: 429, Code: "global/rate-limited", Message: "slow down", RetryAfter: "12"}, provider.Transient, provider.ScopeOffer, 12 * time.Second},
		{lambdamock.Fault{Status: 503, Code: lambda.CodeProviderUnavailable, Message: "Provider unavailable"}, provider.Transient, provider.ScopeOffer, 0},
	} {
		t.Run(tc.fault.Code, func(t *testing.T) {
			e := newEnv(t, lambda.Config{})
			o := e.offer(t)
			prep, err := e.p.Prepare(context.Background(), &o, spec("x"))
			if err != nil {
				t.Fatal(err)
			}
			f := tc.fault
			f.Method, f.Path, f.Times = http.MethodPost, "/instance-operations/launch", 1
			e.api.Fail(f)
			_, err = e.p.Create(context.Background(), &o, prep, spec("x"))
			pe := kindOf(t, err, tc.kind)
			if pe.Scope() != tc.scope || pe.RetryAfter != tc.after {
				t.Fatalf("scope %s after %s", pe.Scope(), pe.RetryAfter)
			}
			if !lambda.IsAPIError(err, tc.fault.Code) {
				t.Fatalf("%v does not wrap code %s", err, tc.fault.Code)
			}
			if n := len(e.api.Calls(http.MethodPost, "/instance-operations/launch")); n != 1 {
				t.Fatalf("%d launch attempts, want exactly 1", n)
			}
		})
	}
}

func TestObserveStatusesAndIdentity(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	o, id := e.launch(t, spec("train"))
	obs, err := e.p.Observe(context.Background(), o.Location, "train")
	if err != nil || len(obs) != 1 || obs[0].Status != provider.StatusPending || obs[0].SSH != nil || obs[0].VendorStatus != "booting" {
		t.Fatalf("booting: %+v %v", obs, err)
	}
	obs, _ = e.p.Observe(context.Background(), o.Location, "train")
	if len(obs) != 1 || obs[0].Status != provider.StatusRunning || obs[0].SSH == nil || obs[0].SSH.User != "ubuntu" || obs[0].SSH.Port != 22 || obs[0].SSH.Host == "" {
		t.Fatalf("active: %+v", obs)
	}
	// Another installation sharing the account does not see it; nor does another region.
	other, _ := lambda.New(lambda.Config{APIKey: apiKey}, lambda.WithInstallation("inst-other"), lambda.WithHTTP(base, e.Client()))
	if obs, _ := other.Observe(context.Background(), o.Location, "train"); len(obs) != 0 {
		t.Fatalf("another installation observes %+v", obs)
	}
	if obs, _ := e.p.Observe(context.Background(), provider.Location{Region: "us-west-3"}, "train"); len(obs) != 0 {
		t.Fatalf("another region observes %+v", obs)
	}
	for vendor, want := range map[string]provider.InstanceStatus{"unhealthy": provider.StatusFailed, "preempted": provider.StatusFailed} {
		e.api.SetStatus(id, vendor)
		obs, _ := e.p.Observe(context.Background(), o.Location, "train")
		if len(obs) != 1 || obs[0].Status != want {
			t.Fatalf("%s: %+v", vendor, obs)
		}
	}
	list, err := e.p.List(context.Background(), provider.Location{})
	if err != nil || len(list) != 1 || list[0].VM != "train" {
		t.Fatalf("list %+v %v", list, err)
	}
}

func TestDeleteOneIDPerCallAndGoneIsSuccess(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	o, id := e.launch(t, spec("train"))
	if err := e.p.Delete(context.Background(), o.Location, "train", []string{id, "0000000000000000000000000000dead"}); err != nil {
		t.Fatal(err)
	}
	calls := e.api.Calls(http.MethodPost, "/instance-operations/terminate")
	if len(calls) != 2 || !strings.Contains(string(calls[0].Body), id) || strings.Contains(string(calls[0].Body), "dead") {
		t.Fatalf("terminate calls %+v", calls)
	}
	obs, _ := e.p.Observe(context.Background(), o.Location, "train")
	if len(obs) != 1 || obs[0].Status != provider.StatusStopping {
		t.Fatalf("terminating: %+v", obs)
	}
	e.api.Fail(lambdamock.Fault{Method: http.MethodPost, Path: "/instance-operations/terminate", Status: 500, Code: lambda.CodeInternal, Times: 1})
	kindOf(t, e.p.Delete(context.Background(), o.Location, "train", []string{id}), provider.Transient)
}

func TestCleanupDeletesExactlyTheVMsResources(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	o, id := e.launch(t, spec("train"))
	if _, err := e.p.Prepare(context.Background(), &o, spec("keep")); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Delete(context.Background(), o.Location, "train", []string{id}); err != nil {
		t.Fatal(err)
	}
	e.api.Settle()
	for range 2 {
		if err := e.p.Cleanup(context.Background(), o.Location, "train"); err != nil {
			t.Fatal(err)
		}
	}
	keep := lambda.SideName("keep", installation)
	if got := e.api.SSHKeys(); !slices.Equal(got, []string{keep}) {
		t.Fatalf("keys after cleanup %v, want only %s", got, keep)
	}
	// The shared ruleset is left to CleanupShared: keep's Prepare names it.
	if got, want := e.api.Rulesets(), []string{provider.SharedName(installation, spec("keep").OpenPorts, nil)}; !slices.Equal(got, want) {
		t.Fatalf("rulesets after cleanup %v, want %v", got, want)
	}
	if n := len(e.api.Calls(http.MethodDelete, "/firewall-rulesets/")); n != 0 {
		t.Fatalf("Cleanup sent %d ruleset deletes, want none", n)
	}
}

func TestDiagnose(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	o, id := e.launch(t, spec("train"))
	e.api.SetStatus(id, "preempted")
	d, err := e.p.Diagnose(context.Background(), o.Location, "train", id)
	if err != nil || !d.Exists || d.Verdict() != provider.Unhealthy || d.Findings[0].Code != "preempted" {
		t.Fatalf("preempted: %+v %v", d, err)
	}
	e.api.Audit = []map[string]any{{"service_name": "cloud", "resource_name": "instance", "action": "terminated",
		"event_time": "2026-01-01T00:05:00Z", "resource_lrns": []string{"lrn:cloud:instance:gone1"}}}
	d, err = e.p.Diagnose(context.Background(), o.Location, "train", "gone1")
	if err != nil || d.Exists || d.Findings[0].Code != "terminated" || d.Findings[0].At.IsZero() {
		t.Fatalf("gone: %+v %v", d, err)
	}
	d, _ = e.p.Diagnose(context.Background(), o.Location, "train", "never")
	if d.Exists || d.Findings[0].Code != "gone" {
		t.Fatalf("never: %+v", d)
	}
}

func TestFactoryReadsKeyFromEnvAndValidates(t *testing.T) {
	t.Setenv(lambda.EnvAPIKey, "from-env")
	p, err := provider.Build("lambda", provider.Settings{Installation: installation})
	if err != nil || p.Name() != "lambda" {
		t.Fatalf("build: %v", err)
	}
	t.Setenv(lambda.EnvAPIKey, "")
	if _, err := provider.Build("lambda", provider.Settings{}); err == nil || !strings.Contains(err.Error(), "api_key") {
		t.Fatalf("missing key: %v", err)
	}
	bad := func(into any) error {
		return json.Unmarshal([]byte(`{"api_key":"k","poll_interval":"soon"}`), into)
	}
	if _, err := provider.Build("lambda", provider.Settings{Decode: bad}); err == nil || !strings.Contains(err.Error(), "poll_interval") {
		t.Fatalf("bad duration: %v", err)
	}
	c := p.Capabilities()
	if c.RequestsPerSecond != 1 || c.Supports(provider.FeatureIdempotencyToken) || !c.Supports(provider.FeatureUserData) {
		t.Fatalf("capabilities %+v", c)
	}
}

func TestCredentialsErrorNeverCarriesTheKey(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	wrong, _ := lambda.New(lambda.Config{APIKey: "wrong-" + apiKey}, lambda.WithHTTP(base, e.Client()))
	req := h100
	_, err := wrong.Plan(context.Background(), &req)
	pe := kindOf(t, err, provider.Credentials)
	if strings.Contains(pe.Error(), "wrong-") {
		t.Fatalf("error carries the key: %v", pe)
	}
	var ae *lambda.APIError
	if !errors.As(err, &ae) || ae.Code != lambda.CodeInvalidAPIKey {
		t.Fatalf("%v", err)
	}
}
