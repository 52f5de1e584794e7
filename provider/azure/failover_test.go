package azure_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/internal/mototest"
	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
	"github.com/org/gpuprov/provider/azure"
	"github.com/org/gpuprov/provider/azure/internal/catalog"
	"github.com/org/gpuprov/provider/vastai"
	"github.com/org/gpuprov/provider/vastai/vastmock"
)

// The clouds of TestFailoverAWSToAzureToVastAI each offer one T4 machine,
// at test prices (not the clouds') that put AWS first ($0.40/h, in
// t4Catalog), Azure second and Vast.ai last.
const (
	azurePrice = 0.55
	vastPrice  = 0.70
)

// t4Catalog is the AWS catalog: g4dn.xlarge in one zone of us-east-1.
const t4Catalog = `{"source": "test fixture", "as_of": "2026-03",
 "instance_types": [{"instance_type": "g4dn.xlarge", "gpu": "T4", "gpu_count": 1, "gpu_memory_mib": 16384,
  "vcpus": 4, "memory_gib": 16, "regions": {"us-east-1": {"price": 0.40, "zones": ["use1-az1"]}}}]}`

// azureT4 is the Azure catalog: NC4as_T4_v3 in eastus.
var azureT4 = catalog.Catalog{Source: "test fixture", Retrieved: "2026-03-01", Sizes: []catalog.Size{{
	Name: "Standard_NC4as_T4_v3", Series: "NCasT4_v3", GPU: "T4", GPUCount: 1, GPUMemoryGB: 16, VCPUs: 4, MemoryGB: 28,
	Spec:    "https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/gpu-accelerated/ncast4v3-series",
	Regions: []catalog.RegionPrice{{Region: "eastus", OnDemand: azurePrice}}}}}

// creates records the order of create requests across the clouds.
type creates struct {
	mu    sync.Mutex
	order []string
}

func (c *creates) note(name string) {
	c.mu.Lock()
	c.order = append(c.order, name)
	c.mu.Unlock()
}

func (c *creates) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.order)
}

// tap wraps next, noting under name every request isCreate says creates a
// machine.
func (c *creates) tap(name string, next http.RoundTripper, isCreate func(*http.Request) bool) http.RoundTripper {
	return roundTrip(func(r *http.Request) (*http.Response, error) {
		if isCreate(r) {
			c.note(name)
		}
		return next.RoundTrip(r)
	})
}

// ec2Stockout sits between the AWS adapter and moto, which cannot be made
// to run out of capacity. It records the action of every EC2 query-protocol
// request and answers the first RunInstances itself, as EC2 does when the
// zone has no capacity for the type: InsufficientInstanceCapacity, one of
// the server errors of the EC2 error reference, so HTTP 500, in the
// reference's XML error envelope (Response/Errors/Error, RequestID). The
// request does not reach moto: nothing is created.
type ec2Stockout struct {
	next http.RoundTripper
	rec  *creates

	mu      sync.Mutex
	actions []string
	refused bool
}

func (s *ec2Stockout) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(r.Body)
		r.Body.Close() // a RoundTripper closes the body it was given
		if err != nil {
			return nil, err
		}
		body = b
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		r.ContentLength = int64(len(b))
	}
	form, _ := url.ParseQuery(string(body)) // a body that is no form has no action: passed on
	action := form.Get("Action")
	s.mu.Lock()
	s.actions = append(s.actions, action)
	refuse := action == "RunInstances" && !s.refused
	s.refused = s.refused || refuse
	s.mu.Unlock()
	if action == "RunInstances" {
		s.rec.note(aws.ID)
	}
	if !refuse {
		return s.next.RoundTrip(r)
	}
	msg := "We currently do not have sufficient " + form.Get("InstanceType") + " capacity in the Availability Zone you requested (us-east-1a). " +
		"Our system will be working on provisioning additional capacity. You can currently get " + form.Get("InstanceType") +
		" capacity by not specifying an Availability Zone in your request or choosing us-east-1b, us-east-1c."
	b := `<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<Response><Errors><Error><Code>InsufficientInstanceCapacity</Code><Message>` +
		msg + `</Message></Error></Errors><RequestID>7a62c49f-347e-4fc4-9331-6e8eEXAMPLE</RequestID></Response>`
	return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: r,
		Header:        http.Header{"Content-Type": {"text/xml;charset=UTF-8"}},
		Body:          io.NopCloser(strings.NewReader(b)),
		ContentLength: int64(len(b))}, nil
}

// sent returns the actions of the requests that went out, in order.
func (s *ec2Stockout) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.actions)
}

// count returns how many requests of action went out.
func (s *ec2Stockout) count(action string) int {
	n := 0
	for _, a := range s.sent() {
		if a == action {
			n++
		}
	}
	return n
}

// TestFailoverAWSToAzureToVastAI launches one T4 through the Provisioner,
// with the SQLite journal, on three clouds: AWS (moto's EC2 server) is
// cheapest but RunInstances answers InsufficientInstanceCapacity (HTTP
// 500); Azure (the ARM mock) is next, but its VM PUT's operation ends in
// AllocationFailed; Vast.ai (vastmock) is dearest and succeeds. Creates
// went out once per cloud in price order; the journal holds the three
// attempts, both failed ones torn down and cleaned up, and both failed
// offers blocked for capacity; nothing of the VM is left on AWS or Azure,
// and after Delete nothing on Vast.ai either.
func TestFailoverAWSToAzureToVastAI(t *testing.T) {
	motoURL := mototest.URL(t)
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t.Cleanup(clk.AutoAdvance())
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	inst := db.Installation()
	fast := 1000.0 // the core's token bucket runs on the wall clock: do not pace the test
	rec := &creates{}

	cat, err := aws.ParseCatalog([]byte(t4Catalog))
	if err != nil {
		t.Fatal(err)
	}
	stockout := &ec2Stockout{next: mototest.Client.Transport, rec: rec}
	ap, err := aws.New(aws.Config{Regions: []string{"us-east-1"}, Image: mototest.AMI, RequestsPerSecond: fast},
		aws.WithCatalog(cat), aws.WithInstallation(inst), aws.WithClock(clk),
		aws.WithEndpoint(aws.Endpoint{URL: motoURL, Client: &http.Client{Transport: stockout},
			AccessKeyID: mototest.KeyID, SecretAccessKey: mototest.Secret}))
	if err != nil {
		t.Fatal(err)
	}

	c, mt := newCloud(t)
	c.autoRun = true
	c.createFaults["eastus"] = []fault{{Async: true, Code: "AllocationFailed",
		Message: "Allocation failed. We do not have sufficient capacity for the requested VM size in this region. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance"}}
	if err := azureT4.Validate(); err != nil {
		t.Fatal(err)
	}
	zp, err := azure.New(azure.Config{SubscriptionID: subscription, RequestsPerSecond: fast},
		azure.WithCatalog(&azureT4), azure.WithInstallation(inst), azure.WithClock(clk),
		azure.WithEndpoint(endpoint, &http.Client{Transport: rec.tap(azure.ID, mt, func(r *http.Request) bool {
			return r.Method == http.MethodPut && vmPut.MatchString(r.URL.Path)
		})}))
	if err != nil {
		t.Fatal(err)
	}

	vapi := vastmock.New("vk", vastmock.Offer{ID: 301, MachineID: 6001, HostID: 81, GPUName: "Tesla T4", NumGPUs: 1, GPURAMMB: 15360,
		DPH: vastPrice, Reliability: 0.99, Verified: true, Geolocation: "Texas, US", DiskSpace: 200, CPUCores: 8, CPURAMMB: 32000})
	vmt := httpmock.NewMockTransport()
	vapi.Register(vmt, "https://vast.test")
	vastDoc := openapitest.Load(t, "../vastai/testdata/openapi.json", "https://vast.test")
	vp, err := vastai.New(vastai.Config{APIKey: "vk", RequestsPerSecond: fast, Burst: 100, ConsistencyWindow: time.Second},
		vastai.WithInstallation(inst), vastai.WithHTTP("https://vast.test", &http.Client{Transport: rec.tap(vastai.ID, vastDoc.Transport(t, vmt),
			func(r *http.Request) bool {
				return r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/api/v0/asks/")
			})}))
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var events []gpuprov.Event
	prov, err := gpuprov.New(db, gpuprov.WithClock(clk), gpuprov.WithProvider(ap, zp, vp),
		gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1),
		gpuprov.WithSSH("", []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ5Vf0zdfBx5i9nRYkuGAOI4dqnA7BD6IVn0i60HNmDH ops@example"}, true),
		gpuprov.WithEvents(func(ev gpuprov.Event) { mu.Lock(); events = append(events, ev); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })

	const name = "xcloud"
	vm, err := prov.Launch(ctx, gpuprov.Request{Name: name, GPU: "t4", Timeout: time.Hour})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if vm.State != gpuprov.StateReady || vm.Provider != vastai.ID || vm.Location.Region != "US" || vm.PricePerHour != vastPrice || vm.SSH == nil {
		t.Fatalf("vm %+v", vm)
	}

	// Creates went out once per cloud, cheapest first; RunInstances was
	// sent once (the adapter does not retry a stockout's 500).
	if want := []string{aws.ID, azure.ID, vastai.ID}; !slices.Equal(rec.list(), want) {
		t.Fatalf("create order %v, want %v", rec.list(), want)
	}
	if n := stockout.count("RunInstances"); n != 1 {
		t.Fatalf("%d RunInstances, want 1", n)
	}

	// The journal: three attempts, the first two torn down after capacity
	// errors and cleaned up, the last the VM's; both failed offers blocked.
	as := gpuprovtest.CheckAttempts(t, db, name, gpuprovtest.Attempt{Provider: aws.ID, Kind: "capacity"},
		gpuprovtest.Attempt{Provider: azure.ID, Kind: "capacity"}, gpuprovtest.Attempt{Provider: vastai.ID})
	if !strings.Contains(as[0].Error, "InsufficientInstanceCapacity") || !strings.Contains(as[1].Error, "AllocationFailed") {
		t.Fatalf("attempt errors %q, %q; want InsufficientInstanceCapacity, AllocationFailed", as[0].Error, as[1].Error)
	}
	blocks, err := db.Blocks(ctx, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, b := range blocks {
		if b.ErrorKind != "capacity" || b.Scope != "offer" {
			t.Fatalf("block %+v, want an offer blocked for capacity", b)
		}
		keys = append(keys, b.Key)
	}
	slices.Sort(keys)
	if want := []string{"offer:aws|us-east-1|use1-az1|g4dn.xlarge|od", "offer:azure|eastus||Standard_NC4as_T4_v3|od"}; !slices.Equal(keys, want) {
		t.Fatalf("blocks %v, want %v", keys, want)
	}
	evs, err := db.Events(ctx, journal.EventQuery{VM: name})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range evs {
		count[e.Type]++
	}
	if count[gpuprov.EvAttempt] != 3 || count[gpuprov.EvFailure] != 2 || count[gpuprov.EvBlocked] != 2 ||
		count[gpuprov.EvTornDown] != 2 || count[gpuprov.EvReady] != 1 {
		t.Fatalf("journal events %v", count)
	}
	mu.Lock()
	sinkEvents := len(events)
	mu.Unlock()
	if sinkEvents < len(evs) {
		t.Fatalf("the sink saw %d events, the journal holds %d", sinkEvents, len(evs))
	}

	// Nothing of the VM is left on AWS: Prepare made a security group and
	// a key pair, the teardown deleted them, and moto's own view holds no
	// instance, group or key of it.
	for _, action := range []string{"CreateSecurityGroup", "ImportKeyPair", "DeleteSecurityGroup", "DeleteKeyPair"} {
		if stockout.count(action) == 0 {
			t.Fatalf("no %s reached moto (actions %v)", action, stockout.sent())
		}
	}
	raw := mototest.EC2(motoURL)
	ins, err := raw.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: awssdk.String("tag:" + provider.LabelInstallation), Values: []string{inst}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ins.Reservations {
		for _, in := range r.Instances {
			t.Errorf("moto holds instance %s (%v)", awssdk.ToString(in.InstanceId), in.State)
		}
	}
	sgs, err := raw.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{
		{Name: awssdk.String("group-name"), Values: []string{provider.ResourceName(name)}}}})
	if err != nil || len(sgs.SecurityGroups) != 0 {
		t.Fatalf("moto holds security groups %+v (%v)", sgs, err)
	}
	kps, err := raw.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{Filters: []types.Filter{
		{Name: awssdk.String("key-name"), Values: []string{provider.ResourceName(name)}}}})
	if err != nil || len(kps.KeyPairs) != 0 {
		t.Fatalf("moto holds key pairs %+v (%v)", kps, err)
	}

	// Nothing of the VM is left on Azure: the VM the allocation failed for
	// was made and deleted, with its OS disk, NIC, public IP and security
	// group; only the installation's resource group and virtual network,
	// shared and free, remain.
	if puts := c.calls(http.MethodPut, "/virtualMachines/"); len(puts) != 1 || !strings.HasSuffix(puts[0].Path, "/gpuprov-"+name+"-2") {
		t.Fatalf("Azure VM PUTs %+v, want one, of attempt 2", puts)
	}
	if left := c.perVM(); len(left) != 0 {
		t.Fatalf("left on Azure: %v", left)
	}

	// The VM's one instance on Vast.ai, carrying its identity.
	vinsts := vapi.Instances()
	if len(vinsts) != 1 || vm.InstanceID != strconv.FormatInt(vinsts[0].ID, 10) || vinsts[0].Label != provider.ResourceName(name)+"."+inst {
		t.Fatalf("vast instances %+v, vm instance %s", vinsts, vm.InstanceID)
	}

	// Deleting the VM removes the last instance.
	if err := prov.Delete(ctx, name); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if got := vapi.Instances(); len(got) != 0 {
		t.Fatalf("vast instances after delete: %+v", got)
	}
}
