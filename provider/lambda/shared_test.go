package lambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/lambda"
	"github.com/org/gpuprov/provider/lambda/lambdamock"
)

// The shared firewall (provider.SharedCleaner): one ruleset per
// installation, region and port set. Every exchange goes through the
// OpenAPI document 1.8.3, as in every test of the package.

// calls returns "METHOD /path" of every call the mock received from the
// from-th on.
func (e *env) calls(from int) []string {
	var out []string
	for _, c := range e.api.Calls("", "")[from:] {
		out = append(out, c.Method+" "+c.Path)
	}
	return out
}

// saw fails t unless the schema check passed an answer ("POST /api/v1/x
// 404").
func (e *env) saw(t *testing.T, answer string) {
	t.Helper()
	if !slices.Contains(e.Doc.Seen(), answer) {
		t.Errorf("no %s answer was checked; seen %v", answer, e.Doc.Seen())
	}
}

// rulesetsOf returns the ruleset ids of the mock's instances, by instance
// name.
func rulesetsOf(api *lambdamock.API) map[string][]string {
	out := map[string][]string{}
	for _, in := range api.Instances() {
		out[in.Name] = in.Rulesets
	}
	return out
}

// TestVMsShareOneRulesetPerRegionAndPorts: two VMs in one region asking
// for the same ports are launched with one ruleset, made once; the second
// Prepare sends no firewall request at all. The same ports in another
// order or case are the same set; other ports, or another region, are
// another ruleset. The Cleanup of one VM leaves the ruleset the other uses.
func TestVMsShareOneRulesetPerRegionAndPorts(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{LaunchInterval: 1})
	o, idA := e.launch(t, spec("a"))
	if got := e.calls(0); !slices.Equal(got, []string{"GET /instance-types", "GET /ssh-keys", "POST /ssh-keys",
		"GET /firewall-rulesets", "POST /firewall-rulesets", "GET /instances", "POST /instance-operations/launch"}) {
		t.Fatalf("the first VM's calls: %v", got)
	}

	// The second VM: its key, and nothing for the firewall.
	before := len(e.api.Calls("", ""))
	sb := spec("b")
	prepB, err := e.p.Prepare(ctx, &o, sb)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.calls(before); !slices.Equal(got, []string{"GET /ssh-keys", "POST /ssh-keys"}) {
		t.Fatalf("the second VM's Prepare sent %v, want its key only", got)
	}
	e.now = e.now.Add(time.Second) // the launch interval
	if _, err := e.p.Create(ctx, &o, prepB, sb); err != nil {
		t.Fatal(err)
	}
	shared := provider.SharedName(installation, sb.OpenPorts, nil)
	if got := e.api.Rulesets(); !slices.Equal(got, []string{shared}) {
		t.Fatalf("rulesets %v, want [%s]", got, shared)
	}
	if n := len(e.api.Calls(http.MethodPost, "/firewall-rulesets")); n != 1 {
		t.Fatalf("%d ruleset creates for two VMs, want 1", n)
	}
	rs := rulesetsOf(e.api)
	if len(rs["gpuprov-a"]) != 1 || !slices.Equal(rs["gpuprov-a"], rs["gpuprov-b"]) {
		t.Fatalf("instances' rulesets %v, want one shared", rs)
	}

	// The same set of ports, in another order and case: the same ruleset.
	sc := spec("c")
	sc.OpenPorts = []provider.Port{{Number: 51820, Protocol: "udp"}, {Number: 6443, Protocol: "tcp"}}
	if _, err := e.p.Prepare(ctx, &o, sc); err != nil {
		t.Fatal(err)
	}
	sd := spec("d")
	sd.OpenPorts = []provider.Port{{Number: 6443, Protocol: "TCP"}, {Number: 51820, Protocol: "UDP"}, {Number: 6443, Protocol: "tcp"}}
	if _, err := e.p.Prepare(ctx, &o, sd); err != nil {
		t.Fatal(err)
	}
	// The first ports in another region (the SXM5 type's).
	offers := e.offers(t)
	south := offers[slices.IndexFunc(offers, func(o provider.Offer) bool { return o.Location.Region == "us-south-1" })]
	if _, err := e.p.Prepare(ctx, &south, spec("e")); err != nil {
		t.Fatal(err)
	}
	posts := e.api.Calls(http.MethodPost, "/firewall-rulesets")
	if len(posts) != 3 {
		t.Fatalf("%d ruleset creates, want 3: (us-east-1, 6443), (us-east-1, 6443+51820), (us-south-1, 6443)", len(posts))
	}
	var made []string
	for _, p := range posts {
		var in struct{ Name, Region string }
		if err := json.Unmarshal(p.Body, &in); err != nil {
			t.Fatal(err)
		}
		made = append(made, in.Name+"@"+in.Region)
	}
	other := provider.SharedName(installation, sc.OpenPorts, nil)
	if want := []string{shared + "@us-east-1", other + "@us-east-1", shared + "@us-south-1"}; !slices.Equal(made, want) {
		t.Fatalf("rulesets made %v, want %v", made, want)
	}

	// a goes; b still uses the ruleset, which Cleanup does not touch.
	if err := e.p.Delete(ctx, o.Location, "a", []string{idA}); err != nil {
		t.Fatal(err)
	}
	e.api.Settle()
	if err := e.p.Cleanup(ctx, o.Location, "a"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.api.Calls(http.MethodDelete, "/firewall-rulesets/")); n != 0 {
		t.Fatalf("Cleanup sent %d ruleset deletes", n)
	}
	if got := e.api.Rulesets(); !slices.Contains(got, shared) || slices.Contains(e.api.SSHKeys(), lambda.SideName("a", installation)) {
		t.Fatalf("after a's cleanup: rulesets %v, keys %v; want the ruleset kept and a's key gone", got, e.api.SSHKeys())
	}
}

// TestConcurrentFirstPreparesMakeOneRuleset: VMs preparing at once in a
// region whose ruleset no one made yet list the rulesets once and make
// one.
func TestConcurrentFirstPreparesMakeOneRuleset(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	o := e.offer(t)
	var wg sync.WaitGroup
	errs := make([]error, 16)
	ids := make([]string, len(errs))
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prep, err := e.p.Prepare(context.Background(), &o, spec(fmt.Sprintf("vm%d", i)))
			var pr struct {
				ID string `json:"firewall_ruleset_id"`
			}
			if err == nil {
				err = json.Unmarshal(prep, &pr)
			}
			errs[i], ids[i] = err, pr.ID
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if ids[0] == "" || slices.ContainsFunc(ids, func(id string) bool { return id != ids[0] }) {
		t.Fatalf("prepared ruleset ids %v, want one", ids)
	}
	if posts, gets := len(e.api.Calls(http.MethodPost, "/firewall-rulesets")), len(e.api.Calls(http.MethodGet, "/firewall-rulesets")); posts != 1 || gets != 1 {
		t.Fatalf("%d ruleset listings and %d creates for 16 concurrent Prepares, want 1 and 1", gets, posts)
	}
}

// TestCleanupSharedLeavesARulesetInUse: Lambda refuses to delete a ruleset
// an instance uses (DELETE /firewall-rulesets/{id} 400
// firewall-rulesets/firewall-ruleset-in-use): CleanupShared leaves it and
// its error is Transient and matches provider.ErrInUse, while the instance
// lives and while it terminates. Once it is gone the ruleset is removed,
// and the next Prepare makes it again. Another installation's ruleset, a
// per-VM one and one the user made are never touched.
func TestCleanupSharedLeavesARulesetInUse(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{LaunchInterval: 1})
	o, id := e.launch(t, spec("train"))
	shared := provider.SharedName(installation, spec("train").OpenPorts, nil)

	// What is not this installation's shared ruleset.
	otherInst, err := lambda.New(lambda.Config{APIKey: apiKey}, lambda.WithInstallation("inst-other"), lambda.WithHTTP(base, e.Client()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otherInst.Prepare(ctx, &o, spec("train")); err != nil {
		t.Fatal(err)
	}
	theirs := provider.SharedName("inst-other", spec("train").OpenPorts, nil)
	user := `{"name":"my-ruleset","region":"us-east-1","rules":[{"protocol":"tcp","port_range":[443,443],"source_network":"0.0.0.0/0","description":"web"}]}`
	// A ruleset that looks shared but whose rules were edited (443 added):
	// its name is no longer what its ports hash to.
	edited := `{"name":"` + provider.SharedName(installation, []provider.Port{{Number: 8080, Protocol: "tcp"}}, nil) + `","region":"us-east-1","rules":[` +
		`{"protocol":"tcp","port_range":[22,22],"source_network":"0.0.0.0/0","description":"gpuprov: ssh"},` +
		`{"protocol":"tcp","port_range":[8080,8080],"source_network":"0.0.0.0/0","description":"gpuprov: 8080/tcp"},` +
		`{"protocol":"tcp","port_range":[443,443],"source_network":"0.0.0.0/0","description":"web"}]}`
	for _, body := range []string{user, edited} {
		if _, err := e.RT.RoundTrip(e.Request(t, http.MethodPost, base+"/firewall-rulesets", body)); err != nil {
			t.Fatal(err)
		}
	}
	all := e.api.Rulesets()

	inUse := func(when string) {
		t.Helper()
		err := e.p.CleanupShared(ctx, o.Location)
		pe := kindOf(t, err, provider.Transient)
		if !errors.Is(err, provider.ErrInUse) || !lambda.IsAPIError(err, lambda.CodeRulesetInUse) {
			t.Fatalf("%s: %v, want ErrInUse and %s", when, pe, lambda.CodeRulesetInUse)
		}
		if got := e.api.Rulesets(); !slices.Equal(got, all) {
			t.Fatalf("%s: rulesets %v, want %v", when, got, all)
		}
	}
	inUse("instance active")
	if err := e.p.Delete(ctx, o.Location, "train", []string{id}); err != nil {
		t.Fatal(err)
	}
	inUse("instance terminating")
	e.api.Settle()
	before := len(e.api.Calls(http.MethodDelete, "/firewall-rulesets/"))
	for range 2 { // the second finds nothing of its own: success
		if err := e.p.CleanupShared(ctx, o.Location); err != nil {
			t.Fatal(err)
		}
	}
	want := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == shared })
	if got := e.api.Rulesets(); !slices.Equal(got, want) || !slices.Contains(got, theirs) {
		t.Fatalf("rulesets after CleanupShared %v, want %v", got, want)
	}
	if n := len(e.api.Calls(http.MethodDelete, "/firewall-rulesets/")) - before; n != 1 {
		t.Fatalf("%d ruleset deletes, want 1", n)
	}

	// Forgotten: the next Prepare makes it again.
	posts := len(e.api.Calls(http.MethodPost, "/firewall-rulesets"))
	if _, err := e.p.Prepare(ctx, &o, spec("next")); err != nil {
		t.Fatal(err)
	}
	if n := len(e.api.Calls(http.MethodPost, "/firewall-rulesets")); n != posts+1 || !slices.Contains(e.api.Rulesets(), shared) {
		t.Fatalf("the Prepare after CleanupShared made %d rulesets; rulesets %v", n-posts, e.api.Rulesets())
	}
}

// TestCleanupSharedOfEveryRegion: a zero Location covers every configured
// region, and only those; a ruleset already gone is success.
func TestCleanupSharedOfEveryRegion(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{Regions: []string{"us-east-1", "us-south-1"}})
	wide, err := lambda.New(lambda.Config{APIKey: apiKey}, lambda.WithInstallation(installation), lambda.WithHTTP(base, e.Client()))
	if err != nil {
		t.Fatal(err)
	}
	req := h100
	all, err := wide.Plan(ctx, &req)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range all { // us-east-1, us-south-1, us-west-3
		if _, err := wide.Prepare(ctx, &o, spec("vm")); err != nil {
			t.Fatal(err)
		}
	}
	// Another process deletes one first: its DELETE answers 404.
	racer := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodDelete {
			first := e.Request(t, http.MethodDelete, r.URL.String(), "")
			if _, err := e.RT.RoundTrip(first); err != nil {
				return nil, err
			}
		}
		return e.RT.RoundTrip(r)
	})}
	p, err := lambda.New(lambda.Config{APIKey: apiKey, Regions: []string{"us-east-1", "us-south-1"}},
		lambda.WithInstallation(installation), lambda.WithHTTP(base, racer))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CleanupShared(ctx, provider.Location{}); err != nil {
		t.Fatal(err)
	}
	if got, want := e.api.Rulesets(), []string{provider.SharedName(installation, spec("vm").OpenPorts, nil)}; !slices.Equal(got, want) {
		t.Fatalf("rulesets %v, want the us-west-3 one only (%v)", got, want)
	}
	e.saw(t, "DELETE /api/v1/firewall-rulesets/{id} 404")
}

// TestCreateWithTheRulesetGoneIsSharedGone: another process of the
// installation removes the shared ruleset between this VM's Prepare and
// its Create. Lambda refuses the launch (404 global/object-does-not-exist,
// ApiErrorLaunchResourceNotFound); the error is Transient and matches
// provider.ErrSharedGone, no instance is left, and the next Prepare makes
// the ruleset again, with which the launch succeeds. A launch refused for
// another missing resource while the ruleset is there stays
// InvalidRequest.
func TestCreateWithTheRulesetGoneIsSharedGone(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{LaunchInterval: 1})
	o := e.offer(t)
	s := spec("train")
	prep, err := e.p.Prepare(ctx, &o, s)
	if err != nil {
		t.Fatal(err)
	}
	other, err := lambda.New(lambda.Config{APIKey: apiKey}, lambda.WithInstallation(installation), lambda.WithHTTP(base, e.Client()))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.CleanupShared(ctx, o.Location); err != nil {
		t.Fatal(err)
	}
	if got := e.api.Rulesets(); len(got) != 0 {
		t.Fatalf("rulesets %v after the other process's CleanupShared", got)
	}

	_, err = e.p.Create(ctx, &o, prep, s)
	kindOf(t, err, provider.Transient)
	if !errors.Is(err, provider.ErrSharedGone) || !lambda.IsAPIError(err, lambda.CodeObjectDoesNotExist) {
		t.Fatalf("create with the ruleset gone: %v, want ErrSharedGone wrapping %s", err, lambda.CodeObjectDoesNotExist)
	}
	if n := len(e.api.Instances()); n != 0 {
		t.Fatalf("%d instances after a refused launch", n)
	}
	e.saw(t, "POST /api/v1/instance-operations/launch 404")

	// Prepare again: the ruleset is made again, and the launch goes.
	posts := len(e.api.Calls(http.MethodPost, "/firewall-rulesets"))
	prep2, err := e.p.Prepare(ctx, &o, s)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.api.Calls(http.MethodPost, "/firewall-rulesets")); n != posts+1 {
		t.Fatalf("the Prepare after ErrSharedGone made %d rulesets, want 1", n-posts)
	}
	e.now = e.now.Add(time.Second) // the launch interval
	if _, err := e.p.Create(ctx, &o, prep2, s); err != nil {
		t.Fatal(err)
	}

	// The ruleset is there and the launch says something does not exist
	// (here, a scripted answer as for an unknown image): not ErrSharedGone.
	e.api.Fail(lambdamock.Fault{Method: http.MethodPost, Path: "/instance-operations/launch", Status: 404,
		Code: lambda.CodeObjectDoesNotExist, Message: "Image does not exist.", Times: 1})
	s2 := spec("second")
	prep3, err := e.p.Prepare(ctx, &o, s2)
	if err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(time.Second)
	_, err = e.p.Create(ctx, &o, prep3, s2)
	kindOf(t, err, provider.InvalidRequest)
	if errors.Is(err, provider.ErrSharedGone) {
		t.Fatalf("%v matches ErrSharedGone with the ruleset still there", err)
	}
}

// TestCleanupStillRemovesAPerVMRuleset: a VM prepared before rulesets were
// shared was launched with its own ruleset, named SideName, and prepared
// data without a ruleset name. Cleanup still removes that ruleset (in use
// while the instance lives: Transient) and the VM's key, and leaves the
// shared one.
func TestCleanupStillRemovesAPerVMRuleset(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{LaunchInterval: 1})
	o := e.offer(t)
	s := spec("old")
	prep, err := e.p.Prepare(ctx, &o, s) // the key, and the shared ruleset
	if err != nil {
		t.Fatal(err)
	}
	legacy := lambda.SideName("old", installation)
	resp, err := e.RT.RoundTrip(e.Request(t, http.MethodPost, base+"/firewall-rulesets", `{"name":"`+legacy+`","region":"us-east-1","rules":[`+
		`{"protocol":"tcp","port_range":[22,22],"source_network":"0.0.0.0/0","description":"gpuprov: ssh"},`+
		`{"protocol":"tcp","port_range":[6443,6443],"source_network":"0.0.0.0/0","description":"gpuprov: 6443/tcp"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var made struct{ Data struct{ ID string } }
	err = json.NewDecoder(resp.Body).Decode(&made)
	resp.Body.Close()
	if err != nil || made.Data.ID == "" {
		t.Fatalf("legacy ruleset: %v", err)
	}
	// The prepared data of a Prepare of before: the VM's own ruleset.
	var old map[string]any
	if err := json.Unmarshal(prep, &old); err != nil {
		t.Fatal(err)
	}
	old["firewall_ruleset_id"] = made.Data.ID
	delete(old, "firewall_ruleset_name")
	oldPrep, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.p.Create(ctx, &o, oldPrep, s)
	if err != nil {
		t.Fatal(err)
	}
	if rs := rulesetsOf(e.api)["gpuprov-old"]; !slices.Equal(rs, []string{made.Data.ID}) {
		t.Fatalf("instance rulesets %v, want the per-VM one", rs)
	}
	shared := provider.SharedName(installation, s.OpenPorts, nil)
	// While the instance lives its own ruleset is in use: Transient.
	kindOf(t, e.p.Cleanup(ctx, o.Location, "old"), provider.Transient)
	if err := e.p.Delete(ctx, o.Location, "old", []string{id}); err != nil {
		t.Fatal(err)
	}
	e.api.Settle()
	if err := e.p.Cleanup(ctx, o.Location, "old"); err != nil {
		t.Fatal(err)
	}
	if got := e.api.Rulesets(); !slices.Equal(got, []string{shared}) {
		t.Fatalf("rulesets after cleanup %v, want only the shared %s", got, shared)
	}
	if got := e.api.SSHKeys(); len(got) != 0 {
		t.Fatalf("keys after cleanup %v", got)
	}
}

// TestATerminatedInstanceHoldsNoRuleset: an instance the API still lists
// as terminated uses nothing: Lambda deletes the ruleset (the mock refuses
// only for instances not terminated).
func TestATerminatedInstanceHoldsNoRuleset(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{})
	o, id := e.launch(t, spec("train"))
	e.api.SetStatus(id, "terminated")
	if err := e.p.CleanupShared(ctx, o.Location); err != nil {
		t.Fatal(err)
	}
	if got := e.api.Rulesets(); len(got) != 0 {
		t.Fatalf("rulesets %v", got)
	}
}
