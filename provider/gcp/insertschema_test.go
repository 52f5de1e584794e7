package gcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
)

// sentInserts is what the adapter put on the wire for one launch: the
// firewalls.insert of Prepare, the instances.insert of Create and, for a
// spec with a placement group, the resourcePolicies.insert of
// EnsurePlacementGroup.
type sentInserts struct {
	Firewall, Instance request
	Policy             *request
}

// launchBodies runs EnsurePlacementGroup (when spec has a placement group),
// Prepare and Create for offer on a fresh mock and returns the insert
// requests as sent.
func launchBodies(t *testing.T, p *gcp.Provider, c *cloud, offer provider.Offer, spec *provider.InstanceSpec) sentInserts {
	t.Helper()
	ctx := context.Background()
	var sent sentInserts
	if spec.PlacementGroup != "" {
		labels := map[string]string{provider.LabelInstallation: spec.Installation, provider.LabelCluster: "c"}
		if err := p.EnsurePlacementGroup(ctx, offer.Location, spec.PlacementGroup, labels); err != nil {
			t.Fatal(err)
		}
		pols := c.calls("POST /compute/v1/projects/" + project + "/regions/" + offer.Location.Region + "/resourcePolicies")
		if len(pols) != 1 {
			t.Fatalf("%d resource policy inserts, want one", len(pols))
		}
		sent.Policy = &pols[0]
	}
	prep, err := p.Prepare(ctx, &offer, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(ctx, &offer, prep, spec); err != nil {
		t.Fatal(err)
	}
	fws := c.calls("POST /compute/v1/projects/" + project + "/global/firewalls")
	ins := c.calls("POST /compute/v1/projects/" + project + "/zones/" + offer.Location.Zone + "/instances")
	if len(fws) != 1 || len(ins) != 1 {
		t.Fatalf("%d firewall and %d instance inserts, want one each", len(fws), len(ins))
	}
	sent.Firewall, sent.Instance = fws[0], ins[0]
	return sent
}

// decoded returns r's body as a generic JSON object.
func decoded(t *testing.T, r request) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// gpuprovMaxNameLength is gpuprov.MaxNameLength, the longest VM name the
// core accepts (the root package is not imported here).
const gpuprovMaxNameLength = 50

// The instances.insert, firewalls.insert and resourcePolicies.insert
// bodies the adapter really sends (as the REST client serializes them,
// captured by the mock) pass the check against Compute Engine's discovery
// document: every field exists in the schema with its JSON type and
// format, enum values are the schema's, the name and tags match their
// patterns, required fields are there, nothing output-only is sent, GPU
// and Spot VMs terminate on host maintenance, labels keep the label rules,
// the firewall's protocols, ports and CIDRs are well formed, the rule
// targets the tag the instance carries, and an instance of a compact
// cluster names the compact placement policy of its region.
func TestInsertBodiesMatchDiscovery(t *testing.T) {
	doc := loadDiscovery(t)
	instInsert, fwInsert := doc.method(t, "instances", "insert"), doc.method(t, "firewalls", "insert")
	policyInsert := doc.method(t, "resourcePolicies", "insert")
	// The longest VM name the core accepts (MaxNameLength 50) and a
	// label-sized installation id.
	longName := strings.Repeat("a1-", 16) + "zz"
	if len(longName) != gpuprovMaxNameLength {
		t.Fatalf("long name has %d characters", len(longName))
	}
	for _, tc := range []struct {
		name      string
		vm        string
		req       provider.ResourceRequest
		zone      string
		spot      bool
		forceSpot bool // mark the offer Spot (the catalog prices no N1 Spot)
		accel     string
		model     string
		disk      int               // the offer's disk, as the core raised it for Request.DiskGB
		labels    map[string]string // Request.Labels
		group     string            // the compact cluster's placement group
	}{
		{name: "on-demand L4 (g2), longest name", vm: longName, req: l4, zone: "us-central1-a"},
		{name: "spot A100 x8 (a2)", vm: "spot-a100", req: provider.ResourceRequest{GPU: "A100-40GB", GPUCount: 8, Spot: provider.SpotOnly},
			zone: "us-central1-a", spot: true, model: "SPOT"},
		{name: "on-demand T4 x4 as guest accelerators (n1)", vm: "t4", req: provider.ResourceRequest{GPU: "T4", GPUCount: 4},
			zone: "us-central1-b", accel: "nvidia-tesla-t4"},
		{name: "spot T4 x4 as guest accelerators (n1)", vm: "spot-t4", req: provider.ResourceRequest{GPU: "T4", GPUCount: 4},
			zone: "us-central1-b", forceSpot: true, accel: "nvidia-tesla-t4", model: "SPOT"},
		{name: "the request's disk and labels", vm: "needs", req: l4, zone: "us-central1-a", disk: 750,
			labels: map[string]string{"team": "ml", "cost-center": "r-and-d"}},
		{name: "compact cluster node, L4 (g2)", vm: "ring-0", req: l4, zone: "us-central1-a", group: "gpuprov-ring"},
		{name: "flex-start H100 x8 (a3), 8h", vm: "flex-h100", req: provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, FlexStart: 8 * time.Hour},
			zone: "us-central1-a", model: "FLEX_START"},
		{name: "flex-start L4 (g2), compact cluster node", vm: "flex-ring", req: provider.ResourceRequest{GPU: "L4", GPUCount: 1, FlexStart: 10 * time.Minute},
			zone: "us-central1-a", model: "FLEX_START", group: "gpuprov-flex"},
		{name: "compact cluster node, spot A100 x8 (a2)", vm: "ring-1", req: provider.ResourceRequest{GPU: "A100-40GB", GPUCount: 8, Spot: provider.SpotOnly},
			zone: "us-central1-a", spot: true, model: "SPOT", group: "gpuprov-" + strings.Repeat("r", 55)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, mt := newCloud(t)
			p := c.provider(t, mt, gcp.Config{Spot: true})
			o := offerIn(t, p, tc.req, tc.zone, tc.spot)
			if tc.forceSpot {
				o.Spot = true
			}
			if tc.disk > 0 {
				o.DiskGB = tc.disk
			}
			spec := newSpec(t, tc.vm)
			spec.UserLabels = tc.labels
			spec.PlacementGroup = tc.group
			sent := launchBodies(t, p, c, o, spec)

			checks := []struct {
				m   *discoveryMethod
				req request
			}{{instInsert, sent.Instance}, {fwInsert, sent.Firewall}}
			if sent.Policy != nil {
				checks = append(checks, struct {
					m   *discoveryMethod
					req request
				}{policyInsert, *sent.Policy})
			}
			for _, r := range checks {
				if v := doc.checkRequest(r.m, url.Values(r.req.Query), r.req.Body); len(v) > 0 {
					// The body is not printed: its user-data holds a host key.
					t.Errorf("%s body breaks the discovery document (revision %s):\n%s", r.m.ID, doc.Revision, joinViolations(v))
				}
			}

			// The rules above had something to bite on.
			in, fw := decoded(t, sent.Instance), decoded(t, sent.Firewall)
			s := sub(in, "scheduling")
			if str(s, "onHostMaintenance") != "TERMINATE" || str(s, "provisioningModel") != tc.model {
				t.Fatalf("scheduling %v, want TERMINATE and provisioning model %q", s, tc.model)
			}
			if tc.model == "SPOT" && (s["automaticRestart"] != false || str(s, "instanceTerminationAction") != "DELETE") {
				t.Fatalf("spot scheduling %v", s)
			}
			if tc.model == "FLEX_START" {
				// Deleted at the end of the request's run duration, kept
				// out of reservations, queued for at most two hours.
				want := fmt.Sprint(int64(tc.req.FlexStart / time.Second))
				if str(sub(s, "maxRunDuration"), "seconds") != want || str(s, "instanceTerminationAction") != "DELETE" ||
					str(sub(in, "reservationAffinity"), "consumeReservationType") != "NO_RESERVATION" ||
					str(sub(sub(in, "params"), "requestValidForDuration"), "seconds") != "7200" {
					t.Fatalf("flex-start body: scheduling %v, reservation affinity %v, params %v; want maxRunDuration %ss",
						s, sub(in, "reservationAffinity"), sub(in, "params"), want)
				}
			}
			ga := list(in, "guestAccelerators")
			if (tc.accel != "") != (len(ga) == 1) {
				t.Fatalf("guest accelerators %v, want %q", ga, tc.accel)
			}
			if tc.accel != "" {
				a := ga[0].(map[string]any)
				if !strings.HasSuffix(str(a, "acceleratorType"), "/"+tc.accel) || a["acceleratorCount"] != 4.0 {
					t.Fatalf("guest accelerator %v", a)
				}
			}
			if l := sub(in, "labels"); l[provider.LabelVM] != tc.vm || l[provider.LabelInstallation] != installation {
				t.Fatalf("labels %v", l)
			}
			boot := sub(list(in, "disks")[0].(map[string]any), "initializeParams")
			wantDisk := "200" // the default disk_size_gb (int64 travels as a JSON string)
			if tc.disk > 0 {
				wantDisk = fmt.Sprint(tc.disk)
			}
			if boot["diskSizeGb"] != wantDisk {
				t.Fatalf("boot disk %v GB, want %s", boot["diskSizeGb"], wantDisk)
			}
			for k, v := range tc.labels {
				if sub(in, "labels")[k] != v || sub(boot, "labels")[k] != v {
					t.Fatalf("label %s=%s missing on the instance %v or its disk %v", k, v, sub(in, "labels"), sub(boot, "labels"))
				}
			}
			// A compact cluster's node names the policy that was made.
			wantPolicies := []any(nil)
			if tc.group != "" {
				pol := decoded(t, *sent.Policy)
				if str(pol, "name") != tc.group || str(sub(pol, "groupPlacementPolicy"), "collocation") != "COLLOCATED" {
					t.Fatalf("policy %v", pol)
				}
				wantPolicies = []any{"projects/" + project + "/regions/" + o.Location.Region + "/resourcePolicies/" + tc.group}
			}
			if got := list(in, "resourcePolicies"); !slices.Equal(got, wantPolicies) {
				t.Fatalf("resource policies %v, want %v", got, wantPolicies)
			}
			// SSH reaches the VM only if the rule targets a tag it carries.
			tags := list(sub(in, "tags"), "items")
			for _, tg := range list(fw, "targetTags") {
				if !slices.Contains(tags, tg) {
					t.Fatalf("firewall targets tag %v, instance carries %v", tg, tags)
				}
			}
		})
	}
}

func joinViolations(vs []violation) string {
	var b strings.Builder
	for _, v := range vs {
		b.WriteString("  " + v.String() + "\n")
	}
	return b.String()
}

// The check is not a rubber stamp: each broken variant of a real body is
// rejected, naming the field and the rule it breaks.
func TestInsertCheckRejectsBrokenBodies(t *testing.T) {
	doc := loadDiscovery(t)
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{Spot: true})
	o := offerIn(t, p, provider.ResourceRequest{GPU: "T4", GPUCount: 4}, "us-central1-b", false)
	sent := launchBodies(t, p, c, o, newSpec(t, "broken"))
	query := url.Values(sent.Instance.Query)
	// A compact cluster's node, for the resource policy's body.
	cc, cmt := newCloud(t)
	cp := cc.provider(t, cmt, gcp.Config{})
	cspec := newSpec(t, "broken-ring")
	cspec.PlacementGroup = "gpuprov-ring"
	compact := launchBodies(t, cp, cc, offerIn(t, cp, l4, "us-central1-a", false), cspec)

	for _, tc := range []struct {
		name     string
		firewall bool
		policy   bool // the resourcePolicies.insert body
		query    url.Values
		mutate   func(b map[string]any)
		path     string // the violation's field
		says     string // and a word of its problem
	}{
		{name: "MIGRATE with guest accelerators", path: "resource.scheduling.onHostMaintenance", says: "with GPUs attached",
			mutate: func(b map[string]any) { sub(b, "scheduling")["onHostMaintenance"] = "MIGRATE" }},
		{name: "MIGRATE on a G2 machine type, GPUs built in", path: "resource.scheduling.onHostMaintenance", says: "with GPUs attached",
			mutate: func(b map[string]any) {
				delete(b, "guestAccelerators")
				b["machineType"] = "zones/us-central1-b/machineTypes/g2-standard-4"
				sub(b, "scheduling")["onHostMaintenance"] = "MIGRATE"
			}},
		{name: "onHostMaintenance outside the enum", path: "resource.scheduling.onHostMaintenance", says: "is not one of [MIGRATE TERMINATE]",
			mutate: func(b map[string]any) { sub(b, "scheduling")["onHostMaintenance"] = "terminate" }},
		{name: "provisioning model outside the enum", path: "resource.scheduling.provisioningModel", says: "is not one of",
			mutate: func(b map[string]any) { sub(b, "scheduling")["provisioningModel"] = "PREEMPTIBLE" }},
		{name: "termination action outside the enum", path: "resource.scheduling.instanceTerminationAction", says: "is not one of",
			mutate: func(b map[string]any) { sub(b, "scheduling")["instanceTerminationAction"] = "DESTROY" }},
		{name: "Spot that restarts", path: "resource.scheduling.automaticRestart", says: "Spot VM",
			mutate: func(b map[string]any) {
				sub(b, "scheduling")["provisioningModel"] = "SPOT"
				sub(b, "scheduling")["automaticRestart"] = true
			}},
		{name: "label key with an upper-case letter", path: "resource.labels.Gpuprov", says: "key",
			mutate: func(b map[string]any) { sub(b, "labels")["Gpuprov"] = "x" }},
		{name: "label key starting with a digit", path: "resource.labels.1st", says: "key",
			mutate: func(b map[string]any) { sub(b, "labels")["1st"] = "x" }},
		{name: "label value of 64 characters", path: "resource.labels.gpuprov", says: "value",
			mutate: func(b map[string]any) { sub(b, "labels")["gpuprov"] = strings.Repeat("v", 64) }},
		{name: "label value with a dot, on the boot disk", path: "resource.disks[0].initializeParams.labels.gpuprov", says: "value",
			mutate: func(b map[string]any) {
				sub(list(b, "disks")[0].(map[string]any), "initializeParams")["labels"] = map[string]any{"gpuprov": "a.b"}
			}},
		{name: "65 labels", path: "resource.labels", says: "at most 64",
			mutate: func(b map[string]any) {
				for i := range 63 {
					sub(b, "labels")["k"+strings.Repeat("x", i)] = ""
				}
			}},
		{name: "unknown field", path: "resource.machineTyp", says: "unknown field",
			mutate: func(b map[string]any) { b["machineTyp"] = b["machineType"] }},
		{name: "unknown nested field", path: "resource.scheduling.spot", says: "unknown field",
			mutate: func(b map[string]any) { sub(b, "scheduling")["spot"] = true }},
		{name: "accelerator count as a string", path: "resource.guestAccelerators[0].acceleratorCount", says: "want an integer",
			mutate: func(b map[string]any) { list(b, "guestAccelerators")[0].(map[string]any)["acceleratorCount"] = "4" }},
		{name: "disk size as a number (int64 travels as a string)", path: "resource.disks[0].initializeParams.diskSizeGb", says: "want a string",
			mutate: func(b map[string]any) {
				sub(list(b, "disks")[0].(map[string]any), "initializeParams")["diskSizeGb"] = 200
			}},
		{name: "name with an upper-case letter", path: "resource.name", says: "does not match",
			mutate: func(b map[string]any) { b["name"] = "gpuprov-Train" }},
		{name: "no name", path: "resource.name", says: "required by compute.instances.insert",
			mutate: func(b map[string]any) { delete(b, "name") }},
		{name: "no machine type", path: "resource.machineType", says: "missing",
			mutate: func(b map[string]any) { delete(b, "machineType") }},
		{name: "no boot disk", path: "resource.disks", says: "0 boot disks",
			mutate: func(b map[string]any) { list(b, "disks")[0].(map[string]any)["boot"] = false }},
		{name: "no network interface", path: "resource.networkInterfaces", says: "missing",
			mutate: func(b map[string]any) { delete(b, "networkInterfaces") }},
		{name: "metadata entry without a value", path: "resource.metadata.items[0].value", says: "required",
			mutate: func(b map[string]any) { delete(list(sub(b, "metadata"), "items")[0].(map[string]any), "value") }},
		{name: "output-only status", path: "resource.status", says: "output only",
			mutate: func(b map[string]any) { b["status"] = "RUNNING" }},
		{name: "tag that is not RFC1035", path: "resource.tags.items[0]", says: "does not match",
			mutate: func(b map[string]any) { sub(b, "tags")["items"] = []any{"gpuprov_train"} }},
		{name: "zero requestId", query: url.Values{"requestId": {"00000000-0000-0000-0000-000000000000"}}, path: "?requestId", says: "non-zero UUID"},
		{name: "unknown query parameter", query: url.Values{"requestID": {query.Get("requestId")}}, path: "?requestID", says: "not a query parameter"},

		{name: "compact placement policy on an N1 machine type", path: "resource.machineType", says: "takes no compact placement policy",
			mutate: func(b map[string]any) {
				b["resourcePolicies"] = []any{"projects/" + project + "/regions/us-central1/resourcePolicies/gpuprov-ring"}
			}},
		{name: "resource policy of another region", path: "resource.resourcePolicies[0]", says: "policy of region europe-west4",
			mutate: func(b map[string]any) {
				b["resourcePolicies"] = []any{"projects/" + project + "/regions/europe-west4/resourcePolicies/gpuprov-ring"}
			}},
		{name: "resource policy by bare name", path: "resource.resourcePolicies[0]", says: "is not projects/P/regions/R/resourcePolicies/NAME",
			mutate: func(b map[string]any) { b["resourcePolicies"] = []any{"gpuprov-ring"} }},
		{name: "compact placement with MIGRATE", path: "resource.scheduling.onHostMaintenance", says: "with a compact placement policy",
			mutate: func(b map[string]any) {
				delete(b, "guestAccelerators")
				b["machineType"] = "zones/us-central1-b/machineTypes/c2-standard-4" // no GPUs: only the compact rule bites
				b["resourcePolicies"] = []any{"projects/" + project + "/regions/us-central1/resourcePolicies/gpuprov-ring"}
				sub(b, "scheduling")["onHostMaintenance"] = "MIGRATE"
			}},

		{name: "policy collocation in lower case", policy: true, path: "resource.groupPlacementPolicy.collocation", says: "is not one of [COLLOCATED UNSPECIFIED_COLLOCATION]",
			mutate: func(b map[string]any) { sub(b, "groupPlacementPolicy")["collocation"] = "collocated" }},
		{name: "policy that is not compact", policy: true, path: "resource.groupPlacementPolicy.collocation", says: "want COLLOCATED",
			mutate: func(b map[string]any) { sub(b, "groupPlacementPolicy")["collocation"] = "UNSPECIFIED_COLLOCATION" }},
		{name: "policy with labels (resource policies take none)", policy: true, path: "resource.labels", says: "unknown field",
			mutate: func(b map[string]any) { b["labels"] = map[string]any{"gpuprov-cluster": "ring"} }},
		{name: "policy vmCount as a string", policy: true, path: "resource.groupPlacementPolicy.vmCount", says: "want an integer",
			mutate: func(b map[string]any) { sub(b, "groupPlacementPolicy")["vmCount"] = "2" }},
		{name: "policy with a fixed vmCount", policy: true, path: "resource.groupPlacementPolicy.vmCount", says: "set:",
			mutate: func(b map[string]any) { sub(b, "groupPlacementPolicy")["vmCount"] = 2 }},
		{name: "policy name with an upper-case letter", policy: true, path: "resource.name", says: "does not match",
			mutate: func(b map[string]any) { b["name"] = "gpuprov-Ring" }},
		{name: "policy with an output-only selfLink", policy: true, path: "resource.selfLink", says: "output only",
			mutate: func(b map[string]any) {
				b["selfLink"] = "https://compute.googleapis.com/compute/v1/projects/p/regions/r/resourcePolicies/x"
			}},

		{name: "firewall direction outside the enum", firewall: true, path: "resource.direction", says: "is not one of [EGRESS INGRESS]",
			mutate: func(b map[string]any) { b["direction"] = "IN" }},
		{name: "firewall rule without a protocol", firewall: true, path: "resource.allowed[0].IPProtocol", says: "missing",
			mutate: func(b map[string]any) { delete(list(b, "allowed")[0].(map[string]any), "IPProtocol") }},
		{name: "firewall protocol in capitals", firewall: true, path: "resource.allowed[0].IPProtocol", says: "is not one of",
			mutate: func(b map[string]any) { list(b, "allowed")[0].(map[string]any)["IPProtocol"] = "TCP" }},
		{name: "firewall port written host:port", firewall: true, path: "resource.allowed[0].ports[0]", says: "is not a port",
			mutate: func(b map[string]any) { list(b, "allowed")[0].(map[string]any)["ports"] = []any{"22:23"} }},
		{name: "firewall port range upside down", firewall: true, path: "resource.allowed[0].ports[0]", says: "is not a port",
			mutate: func(b map[string]any) { list(b, "allowed")[0].(map[string]any)["ports"] = []any{"2000-1000"} }},
		{name: "firewall port as a number", firewall: true, path: "resource.allowed[0].ports[0]", says: "want a string",
			mutate: func(b map[string]any) { list(b, "allowed")[0].(map[string]any)["ports"] = []any{22} }},
		{name: "firewall ports on icmp", firewall: true, path: "resource.allowed[0].ports", says: "only to tcp and udp",
			mutate: func(b map[string]any) { list(b, "allowed")[0].(map[string]any)["IPProtocol"] = "icmp" }},
		{name: "firewall source range that is no CIDR", firewall: true, path: "resource.sourceRanges[0]", says: "CIDR",
			mutate: func(b map[string]any) { b["sourceRanges"] = []any{"0.0.0.0"} }},
		{name: "firewall target tag that is not RFC1035", firewall: true, path: "resource.targetTags[0]", says: "RFC1035",
			mutate: func(b map[string]any) { b["targetTags"] = []any{"Gpuprov-x"} }},
		{name: "firewall without a name", firewall: true, path: "resource.name", says: "required by compute.firewalls.insert",
			mutate: func(b map[string]any) { delete(b, "name") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, req := doc.method(t, "instances", "insert"), sent.Instance
			switch {
			case tc.firewall:
				m, req = doc.method(t, "firewalls", "insert"), sent.Firewall
			case tc.policy:
				m, req = doc.method(t, "resourcePolicies", "insert"), *compact.Policy
			}
			q := url.Values(req.Query)
			if tc.query != nil {
				q = tc.query
			}
			if v := doc.checkRequest(m, url.Values(req.Query), req.Body); len(v) > 0 {
				t.Fatalf("the unbroken body already fails:\n%s", joinViolations(v))
			}
			b := decoded(t, req)
			if tc.mutate != nil {
				tc.mutate(b)
			}
			body, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			vs := doc.checkRequest(m, q, body)
			for _, v := range vs {
				if v.Path == tc.path && strings.Contains(v.Problem, tc.says) {
					return
				}
			}
			t.Fatalf("want a violation at %s saying %q, got:\n%s", tc.path, tc.says, joinViolations(vs))
		})
	}
}

// The label rules accept what the documentation allows: empty values,
// digits, _ and -, international lower-case letters and letters of
// scripts without case, 63 characters (not bytes).
func TestLabelRules(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		ok         bool
	}{
		{"gpuprov", "train", true},
		{"gpuprov-installation", "a1b2c3d4e5f60718", true},
		{"team", "", true},
		{"k_8-s", "v_1-0", true},
		{"ключ", "значение", true},
		{"ラベル", "値", true},
		{"é" + strings.Repeat("é", 62), strings.Repeat("ü", 63), true}, // 63 characters, 126 bytes
		{strings.Repeat("k", 64), "v", false},
		{"k", strings.Repeat("v", 64), false},
		{"", "v", false},
		{"Team", "v", false},
		{"team", "Prod", false},
		{"_team", "v", false},
		{"-team", "v", false},
		{"9team", "v", false},
		{"Ключ", "v", false},
		{"te.am", "v", false},
		{"team", "a b", false},
		{"team", "a/b", false},
	} {
		got := checkLabels("labels", map[string]any{tc.key: tc.value})
		if (len(got) == 0) != tc.ok {
			t.Errorf("label %q=%q: ok %v, want %v (%v)", tc.key, tc.value, len(got) == 0, tc.ok, got)
		}
	}
}
