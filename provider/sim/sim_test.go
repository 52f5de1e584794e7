package sim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

func TestPlanFiltersAndSortsCheapestFirst(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	offers, err := e.p.Plan(ctx, &provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(offers) != 2 {
		t.Fatalf("got %d on-demand single H100 offers, want 2: %+v", len(offers), offers)
	}
	if offers[0].PricePerHour != 2.49 || offers[1].PricePerHour != 2.89 {
		t.Fatalf("prices %v, %v: want 2.49 then 2.89", offers[0].PricePerHour, offers[1].PricePerHour)
	}
	var d struct {
		OfferID string `json:"offer_id"`
	}
	if err := json.Unmarshal(offers[0].Detail, &d); err != nil || d.OfferID != "a-h100x1-use1a" {
		t.Fatalf("detail %s: %v", offers[0].Detail, err)
	}
	if o := offers[0]; o.Provider != cloudName || o.Location != (provider.Location{Region: "us-east", Zone: "us-east-1a"}) || o.Spot {
		t.Fatalf("offer %+v", o)
	}
	spot, err := e.p.Plan(ctx, &provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1, Spot: provider.SpotOrOnDemand})
	if err != nil || len(spot) != 3 || !spot[0].Spot {
		t.Fatalf("spot-or-on-demand: %d offers, first %+v, err %v", len(spot), spot, err)
	}
	regional, err := e.p.Plan(ctx, &provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1, Regions: []string{"eu-west"}})
	if err != nil || len(regional) != 1 || regional[0].Location.Region != "eu-west" {
		t.Fatalf("eu-west: %+v, %v", regional, err)
	}
	none, err := e.p.Plan(ctx, &provider.ResourceRequest{GPU: "B200", GPUCount: 1})
	if err != nil || len(none) != 0 {
		t.Fatalf("B200: %+v, %v; want no offers and no error", none, err)
	}

	// Configured regions apply when the request names none.
	p, _ := newProvider(t, e.srv, sim.Config{Regions: []string{"eu-west"}})
	offers, err = p.Plan(ctx, &provider.ResourceRequest{GPU: "T4", GPUCount: 1, Spot: provider.SpotOrOnDemand})
	if err != nil || len(offers) != 2 || offers[0].PricePerHour != 0.12 {
		t.Fatalf("configured regions: %+v, %v", offers, err)
	}
}

func TestLifecycleWithSSH(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	spec, k := newSpec(t, "vm1")
	of := e.offer(t, h100)
	loc := of.Location

	prep1, err := e.p.Prepare(ctx, &of, spec)
	if err != nil {
		t.Fatal(err)
	}
	prep2, err := e.p.Prepare(ctx, &of, spec)
	if err != nil || !bytes.Equal(prep1, prep2) {
		t.Fatalf("second prepare: %s vs %s, %v", prep2, prep1, err)
	}
	res, _ := e.srv.SideResources(cloudName)
	if len(res.Firewalls) != 1 || len(res.SSHKeys) != 1 {
		t.Fatalf("side resources after two prepares: %+v", res)
	}
	// The firewall is the installation's, shared by every VM with these
	// ports in the region: no VM label.
	if fw := res.Firewalls[0]; fw.Name != provider.SharedName(installation, []provider.Port{{Number: 22, Protocol: "tcp"}, {Number: 6443, Protocol: "tcp"}}, nil) ||
		fw.Region != "us-east" || len(fw.Ports) != 2 || fw.Ports[1].Number != 6443 ||
		fw.Labels[provider.LabelVM] != "" || fw.Labels[provider.LabelShared] != "true" || fw.Labels[provider.LabelInstallation] != installation {
		t.Fatalf("firewall %+v", fw)
	}

	id, err := e.p.Create(ctx, &of, prep1, spec)
	if err != nil {
		t.Fatal(err)
	}
	o := one(t, e.observe(t, loc, "vm1"))
	if o.ID != id || o.Status != provider.StatusPending || o.SSH != nil || o.VM != "vm1" || o.VendorStatus != "provisioning" {
		t.Fatalf("just created: %+v", o)
	}
	e.clk.Advance(bootTime / 2)
	if o := one(t, e.observe(t, loc, "vm1")); o.Status != provider.StatusPending || o.VendorStatus != "booting" {
		t.Fatalf("mid-boot: %+v", o)
	}
	e.clk.Advance(bootTime)
	o = one(t, e.observe(t, loc, "vm1"))
	if o.Status != provider.StatusRunning || o.SSH == nil || o.SSH.Host != "127.0.0.1" || o.SSH.User != "gpuprov" || o.PublicIP != "127.0.0.1" {
		t.Fatalf("after boot: %+v", o)
	}
	d, err := e.p.Diagnose(ctx, loc, "vm1", id)
	if err != nil || d.Verdict() != provider.Healthy {
		t.Fatalf("diagnose running: %+v, %v", d, err)
	}

	// SSH with the injected host key pinned.
	client := dialSSH(t, o.SSH, k)
	if out, code := run(t, client, "echo ok"); out != "ok\n" || code != 0 {
		t.Fatalf("echo ok: %q, exit %d", out, code)
	}
	if _, code := run(t, client, "exit 3"); code != 3 {
		t.Fatalf("exit 3: exit %d", code)
	}
	if out, _ := run(t, client, `pwd; echo "$PATH"`); !strings.Contains(out, e.srv.SandboxDir(cloudName, id)) ||
		!strings.Contains(out, filepath.Join(e.srv.SandboxDir(cloudName, id), "bin")+":") {
		t.Fatalf("sandbox: %q", out)
	}
	client.Close()

	if err := e.p.Delete(ctx, loc, "vm1", []string{id}); err != nil {
		t.Fatal(err)
	}
	if o := one(t, e.observe(t, loc, "vm1")); o.Status != provider.StatusStopping || o.SSH != nil {
		t.Fatalf("after delete: %+v", o)
	}
	providertest.WaitFor(t, "the SSH server to close", func() bool {
		c, err := net.DialTimeout("tcp", o.SSH.Address(), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	// The shared firewall is still in use by the stopping instance.
	if err := e.p.CleanupShared(ctx, loc); !errors.Is(err, provider.ErrInUse) || provider.KindOf(err) != provider.Transient {
		t.Fatalf("CleanupShared while the instance stops: %v, want Transient ErrInUse", err)
	}
	e.clk.Advance(deleteTime)
	if obs := e.observe(t, loc, "vm1"); len(obs) != 0 {
		t.Fatalf("after delete time: %+v", obs)
	}
	for i := 0; i < 2; i++ {
		if err := e.p.Cleanup(ctx, loc, "vm1"); err != nil {
			t.Fatalf("cleanup %d: %v", i, err)
		}
	}
	if res, _ := e.srv.SideResources(cloudName); len(res.Firewalls) != 1 || len(res.SSHKeys) != 0 {
		t.Fatalf("side resources after cleanup: %+v, want the shared firewall only", res)
	}
	if err := e.p.CleanupShared(ctx, provider.Location{}); err != nil {
		t.Fatalf("CleanupShared once nothing uses it: %v", err)
	}
	if res, _ := e.srv.SideResources(cloudName); len(res.Firewalls)+len(res.SSHKeys) != 0 {
		t.Fatalf("side resources after CleanupShared: %+v", res)
	}
	if err := e.p.Delete(ctx, loc, "vm1", []string{id, "i-unknown"}); err != nil {
		t.Fatalf("delete of gone and unknown ids: %v", err)
	}
	d, err = e.p.Diagnose(ctx, loc, "vm1", id)
	if err != nil || d.Exists || d.Status != provider.StatusTerminated || d.Verdict() != provider.Gone {
		t.Fatalf("diagnose deleted: %+v, %v", d, err)
	}
	d, err = e.p.Diagnose(ctx, loc, "vm1", "i-unknown")
	if err != nil || d.Exists || len(d.Findings) != 1 || d.Findings[0].Code != "gone" {
		t.Fatalf("diagnose unknown: %+v, %v", d, err)
	}
}

// dialSSH connects to ep as the spec's user, pinning the injected host key.
func dialSSH(t *testing.T, ep *provider.SSHEndpoint, k keys) *ssh.Client {
	t.Helper()
	client, err := ssh.Dial("tcp", ep.Address(), &ssh.ClientConfig{
		User: ep.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(k.user)},
		HostKeyCallback: ssh.FixedHostKey(k.host), Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatalf("ssh dial %s: %v", ep.Address(), err)
	}
	return client
}

// run runs cmd and returns its stdout and exit code.
func run(t *testing.T, c *ssh.Client, cmd string) (string, int) {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	out, err := sess.Output(cmd)
	var exit *ssh.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitStatus()
	}
	t.Fatalf("run %q: %v", cmd, err)
	return "", -1
}

func TestIdempotencyToken(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ignore    bool
		instances int
	}{
		{"honoured", false, 1},
		{"ignored", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(o *simserver.Options) { o.Clouds[0].IgnoreIdempotencyToken = tc.ignore })
			spec, _ := newSpec(t, "vm1")
			of, id1 := e.launch(t, spec)
			id2, err := e.p.Create(context.Background(), &of, nil, spec)
			if err != nil {
				t.Fatal(err)
			}
			if (id1 == id2) != (tc.instances == 1) {
				t.Fatalf("ids %s and %s for one token (ignore=%v)", id1, id2, tc.ignore)
			}
			if got := len(e.observe(t, of.Location, "vm1")); got != tc.instances {
				t.Fatalf("%d instances, want %d", got, tc.instances)
			}
		})
	}
}

func TestListEveryVMOfTheInstallation(t *testing.T) {
	e := newEnv(t, func(o *simserver.Options) { o.DisableSSH = true })
	e.p, _ = newProvider(t, e.srv, sim.Config{ListPageSize: 50})
	ctx := context.Background()
	const n = 120 // more than two pages
	for i := 0; i < n; i++ {
		spec, _ := newSpec(t, fmt.Sprintf("vm%d", i))
		e.launch(t, spec)
	}
	other, _ := newSpec(t, "theirs")
	other.Installation = "inst-2"
	of := e.offer(t, provider.ResourceRequest{GPU: "T4", GPUCount: 1})
	if _, err := e.p.Create(ctx, &of, nil, other); err != nil {
		t.Fatal(err)
	}
	all, err := e.p.List(ctx, provider.Location{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n {
		t.Fatalf("listed %d, want %d (the other installation's VM excluded)", len(all), n)
	}
	seen := map[string]bool{}
	for _, o := range all {
		if o.VM == "" || seen[o.VM] {
			t.Fatalf("VM %q missing or listed twice", o.VM)
		}
		seen[o.VM] = true
	}
	if euw, err := e.p.List(ctx, provider.Location{Region: "eu-west"}); err != nil || len(euw) != 0 {
		t.Fatalf("eu-west: %d, %v", len(euw), err)
	}
	e.clk.Advance(bootTime)
	obs := one(t, e.observe(t, provider.Location{Region: "us-east"}, "vm7"))
	// With SSH disabled the instance runs with the placeholder endpoint
	// (so an engine without a connect phase counts it ready).
	if obs.Status != provider.StatusRunning || obs.SSH == nil || obs.SSH.Port != simserver.DisabledSSHPort {
		t.Fatalf("with SSH disabled: %+v", obs)
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "sim.json")
	clk := clock.NewFake(t0)
	timing := simserver.Timing{BootTime: simserver.Duration(bootTime), DeleteTime: simserver.Duration(deleteTime)}
	opts := simserver.Options{Clock: clk, StateFile: stateFile, Clouds: []simserver.CloudConfig{{Name: cloudName, Timing: &timing}}}
	srv, err := simserver.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, clk: clk}
	e.p, _ = newProvider(t, srv, sim.Config{})
	spec, k := newSpec(t, "vm1")
	of, id := e.launch(t, spec)
	clk.Advance(bootTime)
	before := one(t, e.observe(t, of.Location, "vm1"))
	key := srv.APIKey(cloudName)
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}

	srv2, err := simserver.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	if srv2.APIKey(cloudName) != key {
		t.Fatal("the generated API key changed across the restart")
	}
	p2, _ := newProvider(t, srv2, sim.Config{})
	ctx := context.Background()
	obs, err := p2.Observe(ctx, of.Location, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	after := one(t, obs)
	if after.ID != id || after.Status != provider.StatusRunning || after.SSH == nil {
		t.Fatalf("after restart: %+v (before %+v)", after, before)
	}
	client := dialSSH(t, after.SSH, k) // same host key, new server
	if out, code := run(t, client, "echo ok"); out != "ok\n" || code != 0 {
		t.Fatalf("echo ok after restart: %q, %d", out, code)
	}
	client.Close()
	res, _ := srv2.SideResources(cloudName)
	if len(res.Firewalls) != 1 || len(res.SSHKeys) != 1 {
		t.Fatalf("side resources after restart: %+v", res)
	}
	// The idempotency token is remembered too.
	if id2, err := p2.Create(ctx, &of, nil, spec); err != nil || id2 != id {
		t.Fatalf("replayed create after restart: %s, %v; want %s", id2, err, id)
	}
}

func TestRegistryBuild(t *testing.T) {
	decode := func(js string) func(any) error {
		return func(into any) error {
			dec := json.NewDecoder(strings.NewReader(js))
			dec.DisallowUnknownFields()
			return dec.Decode(into)
		}
	}
	p, err := provider.Build(sim.ID, provider.Settings{Name: "sim-b", Installation: installation,
		Decode: decode(`{"endpoint":"http://127.0.0.1:1","api_key":"k","poll_interval":"250ms","consistency_window":"3s","requests_per_second":5,"burst":10}`)})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Capabilities()
	if p.Name() != "sim-b" || c.PollInterval != 250*time.Millisecond || c.ConsistencyWindow != 3*time.Second ||
		c.RequestsPerSecond != 5 || c.Burst != 10 || !c.Supports(provider.FeatureIdempotencyToken) {
		t.Fatalf("built %s with %+v", p.Name(), c)
	}
	for _, tc := range []struct{ config, want string }{
		{`{"api_key":"k"}`, "endpoint is not set"},
		{`{"endpoint":"http://127.0.0.1:1"}`, "api_key is not set"},
		{`{"endpoint":"http://127.0.0.1:1","api_key":"k","poll_interval":"soon"}`, "poll_interval"},
		{`{"endpoint":"http://127.0.0.1:1","api_key":"k","colour":"blue"}`, "colour"},
	} {
		_, err := provider.Build(sim.ID, provider.Settings{Decode: decode(tc.config)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %s: err %v, want one naming %q", tc.config, err, tc.want)
		}
	}
}

// stripLabelAny is a transport to a server older than label_any: it drops
// the filter, so the server answers every instance of the installation.
type stripLabelAny struct{ http.RoundTripper }

func (s stripLabelAny) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	q := r.URL.Query()
	q.Del("label_any")
	r.URL.RawQuery = q.Encode()
	return s.RoundTripper.RoundTrip(r)
}

// ListNamed is List less the instances of other VMs, over pages, with
// another installation's VM of the same name left out, at a location and
// at every location; and a server that ignores the filter makes a larger
// answer, not a wrong one.
func TestListNamedIsListOfThoseVMs(t *testing.T) {
	e := newEnv(t, func(o *simserver.Options) { o.DisableSSH = true })
	e.p, _ = newProvider(t, e.srv, sim.Config{ListPageSize: 2})
	ctx := context.Background()
	for i := range 12 {
		spec, _ := newSpec(t, fmt.Sprintf("vm%d", i))
		e.launch(t, spec)
	}
	spec, _ := newSpec(t, "vm3") // a second instance of vm3
	spec.Attempt, spec.IdempotencyToken = 2, "second"
	of, _ := e.launch(t, spec)
	other, _ := newSpec(t, "vm7")
	other.Installation = "inst-2"
	if _, err := e.p.Create(ctx, &of, nil, other); err != nil {
		t.Fatal(err)
	}
	names := []string{"vm3", "vm7", "vm11", "nosuch"}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	old, err := sim.New(sim.Config{Endpoint: e.srv.URL(), Cloud: cloudName, APIKey: e.srv.APIKey(cloudName), ListPageSize: 2},
		sim.WithName(cloudName), sim.WithInstallation(installation), sim.WithHTTPClient(&http.Client{Transport: stripLabelAny{tr}}))
	if err != nil {
		t.Fatal(err)
	}
	for _, loc := range []provider.Location{{}, of.Location, {Region: "eu-west"}} {
		all, err := e.p.List(ctx, loc)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, o := range all {
			if slices.Contains(names, o.VM) {
				want = append(want, o.ID)
			}
		}
		for what, p := range map[string]*sim.Provider{"server with label_any": e.p, "server without": old} {
			got, err := p.ListNamed(ctx, loc, names)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, o := range got {
				ids = append(ids, o.ID)
			}
			slices.Sort(ids)
			slices.Sort(want)
			if !slices.Equal(ids, want) {
				t.Fatalf("%s, at %q: ListNamed %v, List of those VMs %v", what, loc, ids, want)
			}
		}
		if loc.IsZero() && len(want) != 4 {
			t.Fatalf("List of every location holds %d instances of %v, want 4 (vm3 twice, vm7, vm11)", len(want), names)
		}
	}
	if got, err := e.p.ListNamed(ctx, provider.Location{}, nil); err != nil || len(got) != 0 {
		t.Fatalf("ListNamed of no VM: %v, %v", got, err)
	}
}
