package runpod_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/runpod"
	"github.com/org/gpuprov/provider/runpod/runpodmock"
)

func TestPlanReadsStockPerDataCenterAndCloud(t *testing.T) {
	e := newEnv(t, runpod.Config{})
	offers := e.offers(t)
	var got []string
	for _, o := range offers {
		got = append(got, o.InstanceType+"@"+o.Location.Region)
		if o.GPU != "H100-80GB" {
			t.Fatalf("offer %+v", o)
		}
	}
	// US-KS-2 has no stock, MI300X is not canonical; equal prices order by stock.
	want := []string{"NVIDIA H100 PCIe x1 secure@US-CA-2", "NVIDIA H100 80GB HBM3 x1 community@US-TX-3",
		"NVIDIA H100 80GB HBM3 x1 community@EU-RO-1", "NVIDIA H100 80GB HBM3 x1 secure@US-TX-3", "NVIDIA H100 80GB HBM3 x1 secure@EU-RO-1"}
	if !slices.Equal(got, want) {
		t.Fatalf("offers\n%v\nwant\n%v", got, want)
	}
	calls := e.api.Calls(http.MethodGet, "/catalog/gpus")
	if len(calls) != 2 || !strings.Contains(calls[0].Query, "include=AVAILABILITY") || !strings.Contains(calls[0].Query, "product=POD") ||
		!strings.Contains(calls[0].Query, "count=1") || calls[0].Auth != "Bearer "+apiKey {
		t.Fatalf("catalog calls %+v", calls)
	}
	var d map[string]any
	_ = json.Unmarshal(offers[0].Detail, &d)
	if d["gpuTypeId"] != "NVIDIA H100 PCIe" || d["dataCenterId"] != "US-CA-2" || d["cloud"] != "SECURE" {
		t.Fatalf("detail %s", offers[0].Detail)
	}
	// Beyond the per-cloud maximum there is no offer; prices scale with the count.
	req4 := provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 4}
	offers, _ = e.p.Plan(context.Background(), &req4)
	if len(offers) == 0 || slices.ContainsFunc(offers, func(o provider.Offer) bool { return strings.Contains(o.InstanceType, "PCIe") }) {
		t.Fatalf("4x offers %+v", offers)
	}
	if offers[0].PricePerHour != 4*2.69 {
		t.Fatalf("4x price %v", offers[0].PricePerHour)
	}
}

func TestCreateSendsIdentityKeysAndSSHPort(t *testing.T) {
	e := newEnv(t, runpod.Config{})
	_, id := e.launch(t, spec("train"))
	posts := e.api.Calls(http.MethodPost, "/pods")
	if len(posts) != 1 {
		t.Fatalf("%d creates", len(posts))
	}
	var in struct {
		Name, Image, Cloud string
		GPU                struct {
			ID    string
			Count int
		}
		DataCenterIDs []string
		Ports         []string
		Env           map[string]string
	}
	if err := json.Unmarshal(posts[0].Body, &in); err != nil {
		t.Fatal(err)
	}
	if in.Name != "gpuprov-train" || in.GPU.ID != "NVIDIA H100 PCIe" || in.GPU.Count != 1 || in.Cloud != "SECURE" ||
		!slices.Equal(in.DataCenterIDs, []string{"US-CA-2"}) || !slices.Equal(in.Ports, []string{"22/tcp"}) || in.Image != runpod.DefaultImage {
		t.Fatalf("create body %s", posts[0].Body)
	}
	if in.Env[runpod.EnvVM] != "train" || in.Env[runpod.EnvInstallation] != installation ||
		in.Env["PUBLIC_KEY"] != "ssh-ed25519 AAAAfirst user@a\nssh-ed25519 AAAAsecond user@b" {
		t.Fatalf("env %v", in.Env)
	}
	if n := len(e.api.Calls(http.MethodPut, "/account/ssh-keys")); n != 0 {
		t.Fatal("the account-wide SSH keys were replaced")
	}
	o := e.offer(t)
	again, err := e.p.Create(context.Background(), &o, nil, spec("train"))
	if err != nil || again != id || len(e.api.Calls(http.MethodPost, "/pods")) != 1 {
		t.Fatalf("replay %q %v", again, err)
	}
}

func TestCreateErrors(t *testing.T) {
	for _, tc := range []struct {
		status int
		detail string
		kind   provider.ErrorKind
		scope  provider.Scope
	}{
		{400, runpodmock.CapacityDetail, provider.Capacity, provider.ScopeOffer},
		{402, "Insufficient balance", provider.Quota, provider.ScopeProvider},
		{403, "access denied", provider.Unavailable, provider.ScopeOffer},
		{422, "Request validation failed.", provider.InvalidRequest, provider.ScopeOffer},
		{500, "upstream", provider.Transient, provider.ScopeOffer},
	} {
		t.Run(tc.detail, func(t *testing.T) {
			e := newEnv(t, runpod.Config{})
			o := e.offer(t)
			e.api.Fail(runpodmock.Fault{Method: http.MethodPost, Path: "/pods", Status: tc.status, Detail: tc.detail, Times: 1})
			_, err := e.p.Create(context.Background(), &o, nil, spec("x"))
			if pe := kindOf(t, err, tc.kind); pe.Scope() != tc.scope {
				t.Fatalf("scope %s", pe.Scope())
			}
			if n := len(e.api.Calls(http.MethodPost, "/pods")); n != 1 {
				t.Fatalf("%d create attempts", n)
			}
		})
	}
}

func TestObserveWaitsForThePublicSSHPort(t *testing.T) {
	e := newEnv(t, runpod.Config{})
	o, id := e.launch(t, spec("train"))
	var seen []string
	for range 4 {
		obs, err := e.p.Observe(context.Background(), o.Location, "train")
		if err != nil || len(obs) != 1 || obs[0].ID != id {
			t.Fatalf("observe %+v %v", obs, err)
		}
		seen = append(seen, string(obs[0].Status)+":"+obs[0].VendorStatus)
		if obs[0].Status == provider.StatusRunning && (obs[0].SSH == nil || obs[0].SSH.Port != 40022 || obs[0].SSH.User != "root") {
			t.Fatalf("ssh %+v", obs[0].SSH)
		}
	}
	if !slices.Contains(seen, "pending:PROVISIONING") || !slices.Contains(seen, "pending:RUNNING") || seen[len(seen)-1] != "running:RUNNING" {
		t.Fatalf("statuses %v", seen)
	}
	other, _ := runpod.New(runpod.Config{APIKey: apiKey}, runpod.WithInstallation("other"), runpod.WithHTTP(base, e.Client()))
	if obs, _ := other.Observe(context.Background(), o.Location, "train"); len(obs) != 0 {
		t.Fatalf("another installation sees %+v", obs)
	}
	list, _ := e.p.List(context.Background(), provider.Location{})
	if len(list) != 1 || list[0].VM != "train" {
		t.Fatalf("list %+v", list)
	}
	e.api.SetStatus(id, "EXITED")
	d, err := e.p.Diagnose(context.Background(), o.Location, "train", id)
	if err != nil || d.Verdict() != provider.Unhealthy || d.Findings[0].Code != "exited" {
		t.Fatalf("diagnose %+v %v", d, err)
	}
}

func TestDeleteAndCleanup(t *testing.T) {
	e := newEnv(t, runpod.Config{})
	o, id := e.launch(t, spec("train"))
	for range 2 {
		if err := e.p.Delete(context.Background(), o.Location, "train", []string{id}); err != nil {
			t.Fatal(err)
		}
	}
	if pods := e.api.Pods(); len(pods) != 0 {
		t.Fatalf("pods left %+v", pods)
	}
	if err := e.p.Cleanup(context.Background(), o.Location, "train"); err != nil {
		t.Fatal(err)
	}
	d, _ := e.p.Diagnose(context.Background(), o.Location, "train", id)
	if d.Exists || d.Verdict() != provider.Gone {
		t.Fatalf("diagnose gone %+v", d)
	}
	e.api.Fail(runpodmock.Fault{Method: http.MethodGet, Path: "/pods", Status: 429, Detail: "rate limit exceeded for the minute window", RetryAfter: "12", Times: 1})
	_, err := e.p.Observe(context.Background(), o.Location, "train")
	if pe := kindOf(t, err, provider.Transient); pe.RetryAfter != 12*time.Second {
		t.Fatalf("retry after %s", pe.RetryAfter)
	}
}

// TestDeleteOfAClusterPodFails: RunPod answers DELETE /v2/pods/{id} of a
// cluster's pod with 409 (v2 OpenAPI, deletePod). That is Failed, not
// Transient: retrying the same DELETE never succeeds, so the core must not
// loop on it. The pod is still there and the error names the reason.
func TestDeleteOfAClusterPodFails(t *testing.T) {
	e := newEnv(t, runpod.Config{})
	o, id := e.launch(t, spec("train"))
	e.api.JoinCluster(id, "cluster_abc123")
	err := e.p.Delete(context.Background(), o.Location, "train", []string{id})
	kindOf(t, err, provider.Failed)
	if !strings.Contains(err.Error(), "belongs to a cluster") {
		t.Fatalf("error does not say why: %v", err)
	}
	if pods := e.api.Pods(); len(pods) != 1 {
		t.Fatalf("pods %+v", pods)
	}
}

func TestFactory(t *testing.T) {
	t.Setenv(runpod.EnvAPIKey, "from-env")
	p, err := provider.Build("runpod", provider.Settings{Installation: installation})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Capabilities()
	if c.Supports(provider.FeatureUserData) || c.Supports(provider.FeatureIdempotencyToken) || c.Supports(provider.FeatureSpot) {
		t.Fatalf("capabilities %+v", c)
	}
	bad := func(into any) error { return json.Unmarshal([]byte(`{"api_key":"k","clouds":["ALL"]}`), into) }
	if _, err := provider.Build("runpod", provider.Settings{Decode: bad}); err == nil || !strings.Contains(err.Error(), "clouds") {
		t.Fatalf("bad clouds: %v", err)
	}
}
