package vastai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/vastai"
	"github.com/org/gpuprov/provider/vastai/vastmock"
)

// The v1 listing as Vast's OpenAPI document describes it (vast-ai/docs
// api-reference/openapi.yaml, GET /api/v1/instances, showInstances; the
// per-endpoint file api-reference/openapi/yaml/show_instances.yaml):
// "keyset pagination (max 25 per page)", after_token "from the previous
// response's next_token", next_token "null when no more pages",
// select_cols "JSON array of column names to return", select_filters with
// eq, neq, gt, gte, lt, lte, in, notin on label and id. vastmock serves it
// so, and every exchange below is checked against the document.

// seed adds n instances labelled for vms vm-0000… of installation inst
// (an empty inst: no label), one a machine, in id order.
func seed(api *vastmock.API, inst string, n int) []int64 { return seedFrom(api, inst, 0, n) }

// seedFrom is seed for vms vm-<first>… .
func seedFrom(api *vastmock.API, inst string, first, n int) []int64 {
	ids := make([]int64, n)
	for i := range n {
		label := ""
		if inst != "" {
			label = vastai.Label(fmt.Sprintf("vm-%04d", first+i), inst)
		}
		ids[i] = api.Add(vastmock.Instance{Label: label, MachineID: int64(9000 + i), GPUName: "H100 SXM", NumGPUs: 1})
	}
	return ids
}

// listings returns the query of each listing request, in order.
func listings(e *env) []url.Values {
	var out []url.Values
	for _, c := range e.api.Calls(http.MethodGet, "/api/v1/instances") {
		q, _ := url.ParseQuery(c.Query)
		out = append(out, q)
	}
	return out
}

// TestListReadsPastTwoThousandInstances: an account with 2,060 instances
// of this installation, 40 of another and 30 unlabelled, the newest created
// last. List returns every one of this installation, the newest included:
// the listing used to stop after 80 pages (2,000 instances in id order), so
// the newest VMs looked missing and were created again. Each page asks for
// the one after the previous answer's next_token; the last answer's is null.
func TestListReadsPastTwoThousandInstances(t *testing.T) {
	e := newEnv(t, vastai.Config{})
	ours := seed(e.api, installation, 1000)
	seed(e.api, "fedcba9876543210", 40)
	seed(e.api, "", 30)
	ours = append(ours, seedFrom(e.api, installation, 1000, 1060)...)
	newest := e.api.Add(vastmock.Instance{Label: vastai.Label("newest", installation), MachineID: 9999, GPUName: "H100 SXM", NumGPUs: 1})
	ours = append(ours, newest)

	list, err := e.p.List(context.Background(), provider.Location{})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, o := range list {
		id, _ := strconv.ParseInt(o.ID, 10, 64)
		got = append(got, id)
	}
	slices.Sort(got)
	if len(got) != len(ours) || !slices.Equal(got, ours) {
		t.Fatalf("listed %d of this installation's %d instances (newest %d listed: %v)", len(got), len(ours), newest, slices.Contains(got, newest))
	}
	pages := listings(e)
	if want := (1000 + 40 + 30 + 1060 + 1 + 24) / 25; len(pages) != want {
		t.Fatalf("%d listing requests, want %d", len(pages), want)
	}
	for i, q := range pages {
		if q.Get("limit") != "25" || q.Get("order_by") != `[{"col":"id","dir":"asc"}]` || (i == 0) != (q.Get("after_token") == "") {
			t.Fatalf("page %d: %v", i, q)
		}
	}
}

// TestAListingPastTheCapFails: a listing that still has pages after the cap
// is an error saying so (Failed, blocking the provider, wrapping
// ErrListCap), never the first pages taken for the whole account; one that
// ends at the cap is complete.
func TestAListingPastTheCapFails(t *testing.T) {
	e := newEnv(t, vastai.Config{})
	vastai.SetMaxListPages(e.p, 3)
	seed(e.api, installation, 75) // three full pages, the last with next_token null
	if list, err := e.p.List(context.Background(), provider.Location{}); err != nil || len(list) != 75 {
		t.Fatalf("three pages at a cap of three: %d %v", len(list), err)
	}
	seedFrom(e.api, installation, 75, 1) // a fourth page
	_, err := e.p.List(context.Background(), provider.Location{})
	pe := kindOf(t, err, provider.Failed)
	if !errors.Is(err, vastai.ErrListCap) || pe.Scope() != provider.ScopeProvider || !strings.Contains(err.Error(), "more than 3 pages") {
		t.Fatalf("scope %s: %v", pe.Scope(), err)
	}
	if n := strings.Count(err.Error(), "vastai"); n != 1 {
		t.Fatalf("the provider is named %d times: %v", n, err)
	}
}

// TestAListingWhoseTokenRepeatsFails: an answer that hands back the cursor
// it was given would page forever; it is ErrListCap at once. The body is
// showInstances' 200 schema with the document's after_token example.
func TestAListingWhoseTokenRepeatsFails(t *testing.T) {
	e := newEnv(t, vastai.Config{})
	e.api.Fail(vastmock.Fault{Method: http.MethodGet, Path: "/api/v1/instances",
		Status: 200, Body: `{"success":true,"instances":[],"next_token":"eyJ2YWx1ZXMiOiB7ImlkIjogMTIzfX0="}`})
	_, err := e.p.Observe(context.Background(), provider.Location{}, "train")
	if kindOf(t, err, provider.Failed); !errors.Is(err, vastai.ErrListCap) {
		t.Fatalf("%v", err)
	}
	if n := len(listings(e)); n != 2 {
		t.Fatalf("%d listing requests, want 2", n)
	}
}

// TestListNamedFiltersOnTheServer: the core's polling names the VMs it
// waits on; the listing filters on their labels with the document's "in"
// operator, 25 labels a request, and reads one page each however large the
// account.
func TestListNamedFiltersOnTheServer(t *testing.T) {
	e := newEnv(t, vastai.Config{})
	seed(e.api, installation, 2100)
	seed(e.api, "fedcba9876543210", 40) // the same VM names, another installation
	var vms []string
	for i := range 30 {
		vms = append(vms, fmt.Sprintf("vm-%04d", 2*i))
	}
	vms = append(vms, "never-created")
	obs, err := e.p.ListNamed(context.Background(), provider.Location{}, vms)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range obs {
		got = append(got, o.VM)
	}
	slices.Sort(got)
	if want := vms[:30]; !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	pages := listings(e)
	if len(pages) != 2 {
		t.Fatalf("%d listing requests, want 2 (25 labels, then 6)", len(pages))
	}
	var f map[string]map[string][]string
	if err := json.Unmarshal([]byte(pages[1].Get("select_filters")), &f); err != nil || len(f["label"]["in"]) != 6 ||
		f["label"]["in"][5] != vastai.Label("never-created", installation) {
		t.Fatalf("second request's select_filters %s (%v)", pages[1].Get("select_filters"), err)
	}
}

// TestTheListingNeverAsksForOnstart: with inject_host_key the create's
// onstart holds the private host key, and Vast returns onstart in every
// listing that asks for all columns (select_cols defaults to ["*"]). Every
// listing the adapter sends names its columns, onstart not among them, and
// the answer to it (the mock projects as the document says) holds no line
// of the key; the SSH endpoint is still read from what comes back.
func TestTheListingNeverAsksForOnstart(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, vastai.Config{InjectHostKey: true})
	s := spec("train")
	s.HostKey = &provider.HostKey{PrivatePEM: "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktc2VjcmV0\n-----END OPENSSH PRIVATE KEY-----\n",
		Public: "ssh-ed25519 AAAAhost"}
	o, id := e.launch(t, s)
	e.api.Settle()
	obs, err := e.p.Observe(ctx, o.Location, "train")
	if err != nil || len(obs) != 1 || obs[0].SSH == nil || obs[0].SSH.Host != "192.0.2.10" || obs[0].Status != provider.StatusRunning {
		t.Fatalf("observe %+v %v", obs, err)
	}
	if _, err := e.p.List(ctx, provider.Location{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.ListNamed(ctx, provider.Location{}, []string{"train"}); err != nil {
		t.Fatal(err)
	}
	if d, err := e.p.Diagnose(ctx, o.Location, "train", id); err != nil || !d.Exists {
		t.Fatalf("diagnose %+v %v", d, err)
	}
	calls := e.api.Calls(http.MethodGet, "/api/v1/instances")
	if len(calls) < 4 {
		t.Fatalf("%d listings", len(calls))
	}
	for _, c := range calls {
		q, _ := url.ParseQuery(c.Query)
		var cols []string
		if err := json.Unmarshal([]byte(q.Get("select_cols")), &cols); err != nil || slices.Contains(cols, "onstart") ||
			slices.Contains(cols, "*") || !slices.Contains(cols, "id") || !slices.Contains(cols, "label") || !slices.Contains(cols, "ports") {
			t.Fatalf("select_cols %q (%v)", q.Get("select_cols"), err)
		}
		answer := e.Answer(t, e.Request(t, http.MethodGet, base+c.Path+"?"+c.Query, ""))
		var page struct{ Instances []map[string]any }
		if err := json.Unmarshal(answer, &page); err != nil {
			t.Fatal(err)
		}
		for _, in := range page.Instances {
			if _, ok := in["onstart"]; ok || len(in) != len(cols) || strings.Contains(string(answer), "b3BlbnNzaC1rZXktc2VjcmV0") {
				t.Fatalf("an instance of the answer has %d columns for %d asked, or the key: %s", len(in), len(cols), answer)
			}
		}
	}
}
