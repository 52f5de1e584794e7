package aws_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider/aws"
)

// fakeEC2 is a small stateful stand-in for the EC2 query API and the SSM
// JSON API, served through an httpmock transport: instances created by
// RunInstances are listed by DescribeInstances and go away after
// TerminateInstances; security groups, key pairs, placement groups and
// idempotency tokens behave as EC2 documents them. Time is the test's fake clock: an instance
// runs bootTime after launch and is gone deleteTime after termination.
type fakeEC2 struct {
	t     *testing.T
	clk   *clock.Fake
	tr    *httpmock.MockTransport
	mu    sync.Mutex
	seq   int
	reqs  []*fakeReq
	rules []*fakeRule

	instances map[string]*fakeInstance // id →
	tokens    map[string]string        // region|client token → id
	sgs       map[string]*fakeSG       // id →
	keys      map[string]*fakeKey      // region|name →
	pgs       map[string]*fakePG       // region|name →
	hidden    map[string]int           // id → DescribeInstances calls that do not see it yet
	pageSize  int
	ami       string              // SSM parameter value; "" answers ParameterNotFound
	spot      map[string]string   // type|zone id → spot price
	offered   map[string][]string // type → the zone ids that sell it; a type not here is sold everywhere
	crs       []*fakeCR           // capacity reservations (fake_reservations_test.go)
	quotas    map[string]float64  // region|quota code → Service Quotas value; absent: NoSuchResourceException
	blocks    []*fakeOffering     // Capacity Block offerings (fake_blocks_test.go)
	// losePurchases makes that many PurchaseCapacityBlock calls buy the
	// block and then answer InternalError (HTTP 500): a lost answer.
	losePurchases int
}

type fakeInstance struct {
	ID, Region, ZoneID, Type, State, Reason, ReasonMsg, Subnet, SG, Key, Token, UserData, IP string
	PG                                                                                       string // placement group name
	Spot                                                                                     bool
	Tags                                                                                     map[string]string
	Launched, Ended                                                                          time.Time
	Events                                                                                   []string // scheduled event codes
}

type fakeSG struct {
	ID, Region, VPC, Name string
	Tags                  map[string]string
	Rules                 []string // proto/port, and " from <source>" unless 0.0.0.0/0 (fakeRuleText)
}

type fakeKey struct {
	ID, Region, Name, Material string
	Tags                       map[string]string
}

// fakeReq is one request the fake received.
type fakeReq struct {
	Action, Region string
	Form           url.Values
	Header         http.Header
	Body           string // SSM's JSON
}

// fakeRule makes matching requests fail with an EC2 error (Times > 0:
// that many times; 0: always), with Status, or the status EC2 documents
// for Code when Status is 0 (see documentedStatus).
type fakeRule struct {
	Action string
	Match  func(r *fakeReq) bool
	Code   string
	Status int
	Times  int
	hits   int
}

const (
	bootTime   = 90 * time.Second
	deleteTime = 40 * time.Second
	ec2URL     = "https://ec2.test"
	ssmURL     = "https://ssm.test"
	quotasURL  = "https://quotas.test"
	testAMI    = "ami-0123456789abcdef0"
)

var regionOfZone = map[string]string{"use1": "us-east-1", "use2": "us-east-2", "usw2": "us-west-2", "euw1": "eu-west-1",
	"euw2": "eu-west-2", "euc1": "eu-central-1", "apne1": "ap-northeast-1"}

func newFakeEC2(t *testing.T, clk *clock.Fake) *fakeEC2 {
	f := &fakeEC2{t: t, clk: clk, tr: httpmock.NewMockTransport(), instances: map[string]*fakeInstance{},
		tokens: map[string]string{}, sgs: map[string]*fakeSG{}, keys: map[string]*fakeKey{}, pgs: map[string]*fakePG{}, hidden: map[string]int{},
		pageSize: 1000, ami: testAMI, spot: map[string]string{}}
	f.tr.RegisterNoResponder(f.serve)
	return f
}

// endpoint is the provider's test hook for this fake.
func (f *fakeEC2) endpoint() aws.Endpoint {
	return aws.Endpoint{URL: ec2URL, SSMURL: ssmURL, QuotasURL: quotasURL, Client: &http.Client{Transport: f.tr},
		AccessKeyID: "AKIDTEST", SecretAccessKey: "secret-test"}
}

func (f *fakeEC2) fail(r *fakeRule) { f.mu.Lock(); f.rules = append(f.rules, r); f.mu.Unlock() }

// requests returns the requests of action ("" for all).
func (f *fakeEC2) requests(action string) []*fakeReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*fakeReq
	for _, r := range f.reqs {
		if action == "" || r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

// live returns the instances that are not terminated, by id.
func (f *fakeEC2) live() []*fakeInstance {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*fakeInstance
	for _, in := range f.instances {
		f.tick(in)
		if in.State != "terminated" {
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// side returns the security groups, key pairs and placement groups left,
// as region/name.
func (f *fakeEC2) side() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, sg := range f.sgs {
		out = append(out, "sg:"+sg.Region+"/"+sg.Name)
	}
	for _, k := range f.keys {
		out = append(out, "key:"+k.Region+"/"+k.Name)
	}
	for _, g := range f.pgs {
		out = append(out, "pg:"+g.Region+"/"+g.Name)
	}
	slices.Sort(out)
	return out
}

// setState forces an instance's state and reason (a reclaim, a failure).
func (f *fakeEC2) setState(id, state, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.instances[id]
	in.State, in.Reason, in.ReasonMsg = state, reason, reason+": test"
	if state == "terminated" || state == "shutting-down" {
		in.Ended = f.clk.Now()
	}
}

// tick moves an instance along with time. Callers hold f.mu.
func (f *fakeEC2) tick(in *fakeInstance) {
	now := f.clk.Now()
	switch {
	case in.State == "pending" && now.Sub(in.Launched) >= bootTime:
		in.State, in.IP = "running", fmt.Sprintf("198.51.100.%d", 10+len(in.ID)%200)
	case in.State == "shutting-down" && now.Sub(in.Ended) >= deleteTime:
		in.State, in.IP = "terminated", ""
	}
}

var credRE = regexp.MustCompile(`Credential=([^/]+)/\d{8}/([a-z0-9-]+)/(ec2|ssm|servicequotas)/aws4_request`)

func (f *fakeEC2) serve(req *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(req.Body)
	m := credRE.FindStringSubmatch(req.Header.Get("Authorization"))
	if m == nil || m[1] != "AKIDTEST" {
		f.t.Errorf("request to %s without a SigV4 Authorization header of the test key: %q", req.URL, req.Header.Get("Authorization"))
		return ec2Error(http.StatusUnauthorized, "AuthFailure", "no credentials"), nil
	}
	r := &fakeReq{Region: m[2], Header: req.Header.Clone()}
	switch req.URL.Host {
	case "ssm.test":
		r.Action, r.Body = strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "AmazonSSM."), string(b)
	case "quotas.test":
		r.Action, r.Body = strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "ServiceQuotasV20190624."), string(b)
	default:
		form, err := url.ParseQuery(string(b))
		if err != nil || req.Method != http.MethodPost || form.Get("Version") != "2016-11-15" {
			f.t.Errorf("malformed EC2 request: %s %s %q", req.Method, req.URL, b)
		}
		r.Action, r.Form = form.Get("Action"), form
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, r)
	for _, rule := range f.rules {
		if rule.Action == r.Action && (rule.Match == nil || rule.Match(r)) && (rule.Times == 0 || rule.hits < rule.Times) {
			rule.hits++
			status := rule.Status
			if status == 0 {
				status = documentedStatus(rule.Code)
			}
			if r.Action == "GetParameter" || r.Action == "GetServiceQuota" {
				return ssmError(status, rule.Code), nil
			}
			msg := documentedMessage(rule.Code, r)
			if msg == "" {
				msg = "scripted by the test"
			}
			return ec2Error(status, rule.Code, msg), nil
		}
	}
	for _, in := range f.instances {
		f.tick(in)
	}
	f.tickReservations()
	switch r.Action {
	case "GetParameter":
		if f.ami == "" {
			return ssmError(400, "ParameterNotFound"), nil
		}
		return httpmock.NewStringResponse(200, fmt.Sprintf(`{"Parameter":{"Name":%q,"Type":"String","Value":%q,"Version":7}}`,
			jsonField(r.Body, "Name"), f.ami)), nil
	case "DescribeImages":
		// The EC2 API Reference's DescribeImages response: imagesSet/item
		// with rootDeviceName and blockDeviceMapping/item/ebs/volumeSize.
		if r.Form.Get("ImageId.1") != testAMI {
			return answer("DescribeImages", `<imagesSet/>`), nil
		}
		return answer("DescribeImages", `<imagesSet><item><imageId>`+testAMI+`</imageId><imageState>available</imageState>`+
			`<rootDeviceType>ebs</rootDeviceType><rootDeviceName>/dev/sda1</rootDeviceName><blockDeviceMapping><item>`+
			`<deviceName>/dev/sda1</deviceName><ebs><snapshotId>snap-0123456789abcdef0</snapshotId><volumeSize>100</volumeSize>`+
			`<deleteOnTermination>true</deleteOnTermination><volumeType>gp3</volumeType></ebs></item></blockDeviceMapping></item></imagesSet>`), nil
	case "RunInstances":
		return f.runInstances(r), nil
	case "DescribeInstances":
		return f.describeInstances(r), nil
	case "TerminateInstances":
		return f.terminateInstances(r), nil
	case "DescribeInstanceStatus":
		return f.describeInstanceStatus(r), nil
	case "DescribeVpcs":
		return answer("DescribeVpcs", `<vpcSet><item><vpcId>vpc-0def00000000000a1</vpcId><isDefault>true</isDefault><state>available</state></item></vpcSet>`), nil
	case "DescribeSubnets":
		return f.describeSubnets(r), nil
	case "CreateSecurityGroup", "AuthorizeSecurityGroupIngress", "DescribeSecurityGroups", "DeleteSecurityGroup":
		return f.securityGroups(r), nil
	case "ImportKeyPair", "DescribeKeyPairs", "DeleteKeyPair":
		return f.keyPairs(r), nil
	case "CreatePlacementGroup", "DescribePlacementGroups", "DeletePlacementGroup":
		return f.placementGroups(r), nil
	case "DescribeSpotPriceHistory":
		return f.spotPrices(r), nil
	case "DescribeInstanceTypeOfferings":
		return f.offerings(r), nil
	case "DescribeCapacityReservations":
		return f.capacityReservations(r), nil
	case "DescribeCapacityBlockOfferings":
		return f.capacityBlockOfferings(r), nil
	case "PurchaseCapacityBlock":
		return f.purchaseCapacityBlock(r), nil
	case "DescribeAvailabilityZones":
		return f.availabilityZones(r), nil
	case "GetServiceQuota":
		return f.serviceQuota(r), nil
	}
	f.t.Errorf("fake EC2: unexpected action %q", r.Action)
	return ec2Error(400, "InvalidAction", r.Action), nil
}

func jsonField(body, name string) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(body), &m) // a malformed body yields "", which the test sees
	s, _ := m[name].(string)
	return s
}

// list returns the values of a flattened list parameter (InstanceId.1, ...).
func list(form url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := form[prefix+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

// filters returns Filter.N.Name → values.
func filters(form url.Values) map[string][]string {
	out := map[string][]string{}
	for i := 1; ; i++ {
		name := form.Get(fmt.Sprintf("Filter.%d.Name", i))
		if name == "" {
			return out
		}
		out[name] = list(form, fmt.Sprintf("Filter.%d.Value", i))
	}
}

// tagSpec returns the tags of the TagSpecification of resource type rt.
func tagSpec(form url.Values, rt string) map[string]string {
	for i := 1; ; i++ {
		t := form.Get(fmt.Sprintf("TagSpecification.%d.ResourceType", i))
		if t == "" {
			return nil
		}
		if t != rt {
			continue
		}
		tags := map[string]string{}
		for j := 1; ; j++ {
			k, ok := form[fmt.Sprintf("TagSpecification.%d.Tag.%d.Key", i, j)]
			if !ok {
				return tags
			}
			tags[k[0]] = form.Get(fmt.Sprintf("TagSpecification.%d.Tag.%d.Value", i, j))
		}
	}
}

// matchTags applies tag:K, tag-key and the given plain filters.
func matchTags(fs map[string][]string, tags map[string]string) bool {
	for name, vals := range fs {
		if k, ok := strings.CutPrefix(name, "tag:"); ok && !slices.Contains(vals, tags[k]) {
			return false
		}
		if name == "tag-key" {
			if _, ok := tags[vals[0]]; !ok {
				return false
			}
		}
	}
	return true
}

func zoneName(zoneID string) string {
	prefix, n, _ := strings.Cut(zoneID, "-az")
	i, _ := strconv.Atoi(n)
	return regionOfZone[prefix] + string(rune('a'+i-1))
}

func (f *fakeEC2) newID(prefix string) string {
	f.seq++
	return fmt.Sprintf("%s-%017x", prefix, 0xabc000+f.seq)
}

func (f *fakeEC2) runInstances(r *fakeReq) *http.Response {
	tok := r.Form.Get("ClientToken")
	if id, ok := f.tokens[r.Region+"|"+tok]; ok && tok != "" {
		in := f.instances[id]
		if in.Type != r.Form.Get("InstanceType") {
			return ec2Error(400, "IdempotentParameterMismatch", "token reused with other parameters")
		}
		return answer("RunInstances", `<reservationId>r-1</reservationId><instancesSet>`+instanceXML(in)+`</instancesSet>`)
	}
	subnet := r.Form.Get("NetworkInterface.1.SubnetId")
	zoneID, found := "", false
	for _, z := range []string{"az1", "az2", "az3", "az4", "az5", "az6"} {
		for prefix, region := range regionOfZone {
			if region == r.Region && subnet == subnetID(prefix+"-"+z) {
				zoneID, found = prefix+"-"+z, true
			}
		}
	}
	if !found {
		return ec2Error(400, "InvalidSubnetID.NotFound", "no subnet "+subnet+" in "+r.Region)
	}
	if zones, ok := f.offered[r.Form.Get("InstanceType")]; ok && !slices.Contains(zones, zoneID) {
		var names []string
		for _, z := range zones {
			names = append(names, zoneName(z))
		}
		// the message EC2 sends (quoted in trailofbits/algo#314)
		return ec2Error(documentedStatus("Unsupported"), "Unsupported", fmt.Sprintf("Your requested instance type (%s) is not supported in your requested Availability Zone (%s). Please retry your request by not specifying an Availability Zone or choosing %s.",
			r.Form.Get("InstanceType"), zoneName(zoneID), strings.Join(names, ", ")))
	}
	sg := r.Form.Get("NetworkInterface.1.SecurityGroupId.1")
	if g, ok := f.sgs[sg]; !ok || g.Region != r.Region {
		// EC2 API Reference, errors-overview: InvalidGroup.NotFound "The
		// specified security group does not exist"; the message is EC2's
		// answer to RunInstances as quoted in getmoto/moto#5484.
		return ec2Error(400, "InvalidGroup.NotFound", "The security group '"+sg+"' does not exist in VPC 'vpc-0def00000000000a1'")
	}
	pg := r.Form.Get("Placement.GroupName")
	if resp := f.checkPlacement(r.Region, pg, zoneID); resp != nil {
		return resp
	}
	if resp := f.takeReservation(r, zoneID); resp != nil {
		return resp
	}
	ud, _ := base64.StdEncoding.DecodeString(r.Form.Get("UserData"))
	in := &fakeInstance{ID: f.newID("i"), Region: r.Region, ZoneID: zoneID, Type: r.Form.Get("InstanceType"), State: "pending",
		Subnet: subnet, SG: sg, Key: r.Form.Get("KeyName"), Token: tok, UserData: string(ud), PG: pg,
		Spot: r.Form.Get("InstanceMarketOptions.MarketType") == "spot", Tags: tagSpec(r.Form, "instance"), Launched: f.clk.Now()}
	f.instances[in.ID] = in
	if tok != "" {
		f.tokens[r.Region+"|"+tok] = in.ID
	}
	return answer("RunInstances", `<reservationId>r-1</reservationId><instancesSet>`+instanceXML(in)+`</instancesSet>`)
}

func subnetID(zoneID string) string {
	h := fnv.New64a()
	h.Write([]byte(zoneID))
	return fmt.Sprintf("subnet-0%016x", h.Sum64())
}

func (f *fakeEC2) describeInstances(r *fakeReq) *http.Response {
	ids := list(r.Form, "InstanceId")
	fs := filters(r.Form)
	var out []*fakeInstance
	for _, id := range ids {
		in, ok := f.instances[id]
		if !ok || in.Region != r.Region || f.hidden[id] > 0 {
			if ok {
				f.hidden[id]--
			}
			return ec2Error(400, "InvalidInstanceID.NotFound", "The instance ID '"+id+"' does not exist")
		}
		out = append(out, in)
	}
	if len(ids) == 0 {
		for _, in := range f.instances {
			if in.Region != r.Region {
				continue
			}
			if f.hidden[in.ID] > 0 {
				f.hidden[in.ID]--
				continue
			}
			out = append(out, in)
		}
	}
	var kept []*fakeInstance
	for _, in := range out {
		if st := fs["instance-state-name"]; st != nil && !slices.Contains(st, in.State) {
			continue
		}
		if z := fs["availability-zone-id"]; z != nil && !slices.Contains(z, in.ZoneID) {
			continue
		}
		if z := fs["availability-zone"]; z != nil && !slices.Contains(z, zoneName(in.ZoneID)) {
			continue
		}
		if matchTags(fs, in.Tags) {
			kept = append(kept, in)
		}
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].ID < kept[j].ID })
	start, _ := strconv.Atoi(r.Form.Get("NextToken"))
	end := min(len(kept), start+f.pageSize)
	var b strings.Builder
	b.WriteString(`<reservationSet>`)
	for _, in := range kept[start:end] {
		b.WriteString(`<item><reservationId>r-1</reservationId><instancesSet>` + instanceXML(in) + `</instancesSet></item>`)
	}
	b.WriteString(`</reservationSet>`)
	if end < len(kept) {
		b.WriteString(`<nextToken>` + strconv.Itoa(end) + `</nextToken>`)
	}
	return answer("DescribeInstances", b.String())
}

func instanceXML(in *fakeInstance) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<item><instanceId>%s</instanceId><imageId>%s</imageId><instanceState><code>0</code><name>%s</name></instanceState>`,
		in.ID, testAMI, in.State)
	fmt.Fprintf(&b, `<instanceType>%s</instanceType><placement><availabilityZone>%s</availabilityZone><availabilityZoneId>%s</availabilityZoneId><groupName>%s</groupName></placement>`,
		in.Type, zoneName(in.ZoneID), in.ZoneID, esc(in.PG))
	fmt.Fprintf(&b, `<launchTime>%s</launchTime><privateIpAddress>10.0.0.%d</privateIpAddress>`, in.Launched.UTC().Format(time.RFC3339), 5+len(in.ID)%100)
	if in.IP != "" {
		fmt.Fprintf(&b, `<ipAddress>%s</ipAddress>`, in.IP)
	}
	if in.Reason != "" {
		fmt.Fprintf(&b, `<stateReason><code>%s</code><message>%s</message></stateReason>`, in.Reason, esc(in.ReasonMsg))
	}
	b.WriteString(`<tagSet>`)
	keys := make([]string, 0, len(in.Tags))
	for k := range in.Tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, `<item><key>%s</key><value>%s</value></item>`, esc(k), esc(in.Tags[k]))
	}
	b.WriteString(`</tagSet></item>`)
	return b.String()
}

func (f *fakeEC2) terminateInstances(r *fakeReq) *http.Response {
	ids := list(r.Form, "InstanceId")
	for _, id := range ids {
		if !strings.HasPrefix(id, "i-") {
			return ec2Error(400, "InvalidInstanceID.Malformed", "Invalid id: "+id)
		}
		if in, ok := f.instances[id]; !ok || in.Region != r.Region {
			return ec2Error(400, "InvalidInstanceID.NotFound", "The instance ID '"+id+"' does not exist")
		}
	}
	var b strings.Builder
	for _, id := range ids {
		in := f.instances[id]
		prev := in.State
		if in.State != "terminated" && in.State != "shutting-down" {
			in.State, in.Ended, in.Reason, in.ReasonMsg = "shutting-down", f.clk.Now(), "Client.UserInitiatedShutdown", "User initiated shutdown"
		}
		fmt.Fprintf(&b, `<item><instanceId>%s</instanceId><currentState><code>32</code><name>%s</name></currentState><previousState><code>16</code><name>%s</name></previousState></item>`,
			id, in.State, prev)
	}
	return answer("TerminateInstances", `<instancesSet>`+b.String()+`</instancesSet>`)
}

func (f *fakeEC2) describeInstanceStatus(r *fakeReq) *http.Response {
	var b strings.Builder
	for _, id := range list(r.Form, "InstanceId") {
		in, ok := f.instances[id]
		if !ok {
			return ec2Error(400, "InvalidInstanceID.NotFound", "The instance ID '"+id+"' does not exist")
		}
		check := "ok"
		if in.State == "pending" {
			check = "initializing"
		} else if in.State != "running" {
			check = "not-applicable"
		}
		fmt.Fprintf(&b, `<item><instanceId>%s</instanceId><availabilityZone>%s</availabilityZone><instanceState><code>16</code><name>%s</name></instanceState>`,
			id, zoneName(in.ZoneID), in.State)
		fmt.Fprintf(&b, `<systemStatus><status>%s</status></systemStatus><instanceStatus><status>%s</status></instanceStatus><eventsSet>`, check, check)
		for _, e := range in.Events {
			fmt.Fprintf(&b, `<item><code>%s</code><description>The instance is running on degraded hardware</description><notBefore>%s</notBefore></item>`,
				e, f.clk.Now().Add(72*time.Hour).UTC().Format(time.RFC3339))
		}
		b.WriteString(`</eventsSet></item>`)
	}
	return answer("DescribeInstanceStatus", `<instanceStatusSet>`+b.String()+`</instanceStatusSet>`)
}

func (f *fakeEC2) describeSubnets(r *fakeReq) *http.Response {
	fs := filters(r.Form)
	var b strings.Builder
	for prefix, region := range regionOfZone {
		if region != r.Region {
			continue
		}
		for n := 1; n <= 6; n++ {
			z := fmt.Sprintf("%s-az%d", prefix, n)
			if v := fs["availability-zone-id"]; v != nil && !slices.Contains(v, z) {
				continue
			}
			if v := fs["availability-zone"]; v != nil && !slices.Contains(v, zoneName(z)) {
				continue
			}
			if ids := list(r.Form, "SubnetId"); ids != nil && !slices.Contains(ids, subnetID(z)) {
				continue
			}
			fmt.Fprintf(&b, `<item><subnetId>%s</subnetId><vpcId>vpc-0def00000000000a1</vpcId><availabilityZone>%s</availabilityZone><availabilityZoneId>%s</availabilityZoneId><defaultForAz>true</defaultForAz><mapPublicIpOnLaunch>true</mapPublicIpOnLaunch><state>available</state></item>`,
				subnetID(z), zoneName(z), z)
		}
	}
	return answer("DescribeSubnets", `<subnetSet>`+b.String()+`</subnetSet>`)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

func tagsXML(tags map[string]string) string {
	var b strings.Builder
	b.WriteString(`<tagSet>`)
	for k, v := range tags {
		fmt.Fprintf(&b, `<item><key>%s</key><value>%s</value></item>`, esc(k), esc(v))
	}
	b.WriteString(`</tagSet>`)
	return b.String()
}

// answer is a successful EC2 answer of action with the given body.
func answer(action, body string) *http.Response {
	resp := httpmock.NewStringResponse(200, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<`+action+`Response xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>req-1</requestId>`+body+`</`+action+`Response>`)
	resp.Header.Set("Content-Type", "text/xml;charset=UTF-8")
	return resp
}

// documentedStatus is the HTTP status EC2 answers code with. The EC2 API
// Reference's error-code page (errors-overview) puts every code in its
// client table (400-series status) or its server table (500-series);
// within those, AuthFailure and OptInRequired come as 401, the
// authorization codes as 403, and the throttling and overload codes as 503.
func documentedStatus(code string) int {
	switch code {
	case "InsufficientInstanceCapacity", "InsufficientAddressCapacity", "InsufficientReservedInstanceCapacity",
		"InsufficientCapacity", "InsufficientHostCapacity", "InsufficientVolumeCapacity",
		"InternalError", "InternalFailure", "ServerInternal", "BandwidthLimitExceeded":
		return http.StatusInternalServerError
	case "RequestLimitExceeded", "ServiceUnavailable", "Unavailable":
		return http.StatusServiceUnavailable
	case "AuthFailure", "OptInRequired", "PendingVerification", "AccountDisabled":
		return http.StatusUnauthorized
	case "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch", "MissingAuthenticationToken", "Blocked":
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

// documentedMessage is the message EC2 sends with code for request r, for
// the codes the tests depend on (the reference's description, or the text
// EC2 or moto sends), or "".
func documentedMessage(code string, r *fakeReq) string {
	typ := r.Form.Get("InstanceType")
	switch code {
	case "InsufficientInstanceCapacity":
		return "We currently do not have sufficient " + typ + " capacity in the Availability Zone you requested."
	case "InsufficientAddressCapacity":
		return "Not enough available addresses to satisfy your minimum request."
	case "InsufficientReservedInstanceCapacity":
		return "Not enough available Reserved Instances to satisfy your minimum request."
	case "InvalidInstanceType":
		return "The instance type is not supported for this request."
	case "InvalidInstanceType.NotFound":
		return "The instance type '" + typ + "' does not exist" // moto 5.2.1
	}
	return ""
}

// ec2Error is an EC2 error answer, shaped as the reference's "Example error
// response": Response/Errors/Error/{Code,Message} and RequestID.
func ec2Error(status int, code, msg string) *http.Response {
	resp := httpmock.NewStringResponse(status, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Response><Errors><Error><Code>`+code+`</Code><Message>`+esc(msg)+`</Message></Error></Errors><RequestID>req-err</RequestID></Response>`)
	resp.Header.Set("Content-Type", "text/xml;charset=UTF-8")
	return resp
}

func ssmError(status int, code string) *http.Response {
	resp := httpmock.NewStringResponse(status, `{"__type":"`+code+`","message":"scripted"}`)
	resp.Header.Set("Content-Type", "application/x-amz-json-1.1")
	return resp
}
