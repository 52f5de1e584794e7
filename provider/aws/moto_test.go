package aws_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
	"github.com/org/gpuprov/provider/providertest"
)

// The moto suite runs the adapter against moto's EC2 server, an emulator
// the project did not write (Python moto 5.2.1, `moto_server`). One server
// is started per test binary, on a free loopback port, and stopped by its
// pid when the tests end (motoMain). It validates instance types and AMIs
// (motoEnv), so RunInstances refuses what EC2 would. Every test logs a
// "moto suite:" line naming moto's version. Known emulator limits, handled
// here and never in the adapter:
//   - moto does not deduplicate RunInstances' ClientToken: idempotency is
//     asserted by the httpmock tests only;
//   - it answers DescribeInstances' availability-zone-id filter with HTTP
//     500 and does not know it in DescribeSubnets: the adapter matches
//     zones itself anyway;
//   - terminating again an instance launched with a network interface
//     answers InvalidNetworkInterfaceID.NotFound (EC2 answers success): the
//     harness sends Delete only for ids the emulator does not already show
//     terminated (motoProvider);
//   - DeleteKeyPair by KeyPairId is ignored: the adapter deletes by
//     KeyName, which EC2 accepts too;
//   - an instance launched with a network interface lists its security
//     group on the interface only, not in the instance's SecurityGroups;
//   - instances run at once and terminate at once, and are listed as soon
//     as RunInstances answers: no Settle is needed, and the Provisioner
//     tests poll every 20ms with a 10ms consistency window (motoTimings);
//   - moto_server (Werkzeug) closes the connection after every answer.
const motoInstallHint = "moto_server not found on PATH: install it with `pip install 'moto[server]==5.2.1'`"

var moto struct {
	once    sync.Once
	cmd     *exec.Cmd
	url     string
	version string
	err     error
}

// motoEnv makes moto check what real EC2 checks: RunInstances refuses an
// instance type the region does not offer (InvalidInstanceType.NotFound)
// and an AMI it does not hold (InvalidAMIID.NotFound).
var motoEnv = []string{"MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION=true", "MOTO_ENABLE_AMI_VALIDATION=true"}

// motoVersion returns the version of the moto package that moto_server
// runs, asking the Python its script names (python3 when it names none,
// as a pyenv shim does), or a note saying why it is unknown.
func motoVersion() string {
	py := "python3"
	if path, err := exec.LookPath("moto_server"); err == nil {
		if b, err := os.ReadFile(path); err == nil {
			line, _, _ := strings.Cut(string(b), "\n")
			if f := strings.Fields(strings.TrimPrefix(line, "#!")); strings.HasPrefix(line, "#!") && len(f) > 0 &&
				strings.HasPrefix(filepath.Base(f[0]), "python") {
				py = f[0]
			}
		}
	}
	out, err := exec.Command(py, "-c", "import moto; print(moto.__version__)").Output()
	if err != nil {
		return fmt.Sprintf("(version unknown: %s: %v)", py, err)
	}
	return strings.TrimSpace(string(out))
}

// motoMain stops the moto server, if a test started one, when the tests end.
type motoMain struct{ m *testing.M }

func (mm motoMain) Run() int {
	code := mm.m.Run()
	if moto.cmd != nil && moto.cmd.Process != nil {
		_ = moto.cmd.Process.Kill() // by its pid; its state is thrown away with it
		_ = moto.cmd.Wait()         // the exit status of a killed server says nothing
	}
	return code
}

// motoURL returns the URL of the package's moto server, starting it on
// first use. Outside CI a missing moto_server skips the test; under
// CI=true it fails it.
func motoURL(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("moto_server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(motoInstallHint)
		}
		t.Skip(motoInstallHint)
	}
	moto.once.Do(func() {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			moto.err = err
			return
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		moto.cmd = exec.Command("moto_server", "-H", "127.0.0.1", "-p", strconv.Itoa(port))
		moto.cmd.Env = append(os.Environ(), motoEnv...)
		moto.version = motoVersion()
		if err := moto.cmd.Start(); err != nil {
			moto.err = err
			return
		}
		moto.url = fmt.Sprintf("http://127.0.0.1:%d", port)
		deadline := time.Now().Add(30 * time.Second)
		for { // the server's own start-up, polled in real time
			resp, err := motoClient.Get(moto.url + "/moto-api/")
			if err == nil {
				resp.Body.Close()
				return
			}
			if time.Now().After(deadline) {
				moto.err = fmt.Errorf("moto_server on port %d did not answer within 30s: %w", port, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	if moto.err != nil {
		t.Fatalf("moto: %v", moto.err)
	}
	t.Logf("moto suite: running against moto %s's EC2 server at %s (%s)", moto.version, moto.url, strings.Join(motoEnv, " "))
	return moto.url
}

// motoClient keeps no idle connection, so none outlives the tests, and
// hands net/http each request body as an in-memory reader (inMemoryBody).
var motoClient = &http.Client{Transport: inMemoryBody{&http.Transport{DisableKeepAlives: true}}}

// inMemoryBody reads a request's body into memory before the transport
// sends it. The SDK's body (smithy-go's safe read-closer) answers io.EOF
// as an error from WriteTo once the SDK has closed it, which the SDK does
// as soon as the answer's headers are in; net/http reads a body once more
// after its Content-Length bytes and, meeting that error there, closes
// the connection under the answer's body ("read tcp ...: use of closed
// network connection", about once in a few hundred calls under -race).
// An in-memory body is written with the headers and read past its end
// with no error. The adapter classifies such a cut-short answer Transient
// (TestClassifyAnAnswerCutShort), so the core retries it; the harness calls
// the primitives without the core and must not meet it.
type inMemoryBody struct{ next http.RoundTripper }

func (t inMemoryBody) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return t.next.RoundTrip(r)
	}
	b, err := io.ReadAll(r.Body)
	r.Body.Close() // a RoundTripper closes the body it was given
	if err != nil {
		return nil, err
	}
	c := r.Clone(r.Context())
	c.Body = io.NopCloser(bytes.NewReader(b))
	c.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	c.ContentLength = int64(len(b))
	return t.next.RoundTrip(c)
}

const (
	motoKeyID  = "AKIDMOTOTESTING"
	motoSecret = "moto-secret-testing"
	// motoAMI is an image moto holds in every region (Ubuntu 14.04 of its
	// default set, moto/ec2/resources/amis.json), so that RunInstances
	// passes moto's AMI validation.
	motoAMI = "ami-1e749f67"
)

// newMotoProvider returns a provider of installation inst on moto.
func newMotoProvider(t *testing.T, url, inst string) *aws.Provider {
	t.Helper()
	p, err := aws.New(aws.Config{Regions: []string{"us-east-1"}, Image: motoAMI}, aws.WithInstallation(inst),
		aws.WithEndpoint(aws.Endpoint{URL: url, Client: motoClient, AccessKeyID: motoKeyID, SecretAccessKey: motoSecret}))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// motoEC2 is a raw EC2 client of moto: the emulator's own view.
func motoEC2(url string) *ec2.Client {
	return ec2.New(ec2.Options{Region: "us-east-1", BaseEndpoint: awssdk.String(url), HTTPClient: motoClient,
		Credentials: credentials.NewStaticCredentialsProvider(motoKeyID, motoSecret, "")})
}

// motoProvider is the adapter with the harness's one allowance for moto:
// Delete is not sent for ids moto already shows terminated (see above).
type motoProvider struct {
	*aws.Provider
	raw *ec2.Client
}

func (m motoProvider) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	out, err := m.raw.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	if err != nil {
		return m.Provider.Delete(ctx, loc, vm, ids)
	}
	gone := map[string]bool{}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			if in.State != nil && in.State.Name == types.InstanceStateNameTerminated {
				gone[awssdk.ToString(in.InstanceId)] = true
			}
		}
	}
	var live []string
	for _, id := range ids {
		if !gone[id] {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return m.Provider.Delete(ctx, loc, vm, live)
}

var _ provider.Lister = motoProvider{}

// motoInstallation is the installation id of one test of this process:
// the same in every run of the test (-count), so that what one run leaves
// for the next (the kit does not clean up its broken instance) is adopted,
// and distinct between tests, so that one test's leftovers are not
// another's.
func motoInstallation(t *testing.T) string {
	return fmt.Sprintf("moto-%d-%s", os.Getpid(), t.Name())
}

// The conformance kit against moto.
func TestMotoConformance(t *testing.T) {
	url := motoURL(t)
	raw := motoEC2(url)
	inst := motoInstallation(t)
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) provider.CloudProvider {
			return motoProvider{Provider: newMotoProvider(t, url, inst), raw: raw}
		},
		Request:      l4,
		Installation: inst,
		Break: func(t *testing.T, id string) {
			if _, err := raw.StopInstances(context.Background(), &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
				t.Fatalf("stop %s in moto: %v", id, err)
			}
		},
	})
}

// Every primitive in order against moto, then moto's own view (raw
// DescribeInstances, DescribeSecurityGroups, DescribeKeyPairs) shows
// nothing of the VM left.
func TestMotoPrimitivesInOrder(t *testing.T) {
	url := motoURL(t)
	raw := motoEC2(url)
	inst := motoInstallation(t)
	p := motoProvider{Provider: newMotoProvider(t, url, inst), raw: raw}
	ctx := context.Background()
	const vm = "moto-prim"
	spec := newSpec(t, vm)
	spec.Installation = inst
	o := func() provider.Offer {
		offers, err := p.Plan(ctx, &l4)
		if err != nil || len(offers) == 0 {
			t.Fatalf("plan: %d offers, %v", len(offers), err)
		}
		return offers[0]
	}()
	a, err := p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	b, err := p.Prepare(ctx, &o, spec)
	if err != nil || string(a) != string(b) {
		t.Fatalf("prepare again: %s, %v; first %s", b, err, a)
	}
	id, err := p.Create(ctx, &o, a, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	obs, err := p.Observe(ctx, o.Location, vm)
	if err != nil || len(obs) != 1 || obs[0].ID != id || obs[0].Location != o.Location ||
		(obs[0].Status != provider.StatusPending && obs[0].Status != provider.StatusRunning) {
		t.Fatalf("observe: %+v, %v; want %s pending or running in %s", obs, err, id, o.Location)
	}
	for _, loc := range []provider.Location{{}, {Region: o.Location.Region}, o.Location} {
		all, err := p.List(ctx, loc)
		if err != nil || len(all) != 1 || all[0].ID != id || all[0].VM != vm {
			t.Fatalf("list %s: %+v, %v", loc, all, err)
		}
	}
	if other, err := p.List(ctx, provider.Location{Region: o.Location.Region, Zone: "use1-az99"}); err != nil || len(other) != 0 {
		t.Fatalf("list of another zone: %+v, %v", other, err)
	}
	d, err := p.Diagnose(ctx, o.Location, vm, id)
	if err != nil || !d.Exists || d.InstanceID != id {
		t.Fatalf("diagnose: %+v, %v", d, err)
	}
	if err := p.Delete(ctx, o.Location, vm, []string{id}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := p.Delete(ctx, o.Location, vm, []string{p.UnknownID()}); err != nil {
		t.Fatalf("delete of an unknown id: %v", err)
	}
	if obs, err := p.Observe(ctx, o.Location, vm); err != nil || len(obs) != 0 {
		t.Fatalf("observe after delete: %+v, %v", obs, err)
	}
	for i := range 2 {
		if err := p.Cleanup(ctx, o.Location, vm); err != nil {
			t.Fatalf("cleanup %d: %v", i+1, err)
		}
	}

	ins, err := raw.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: awssdk.String("tag:" + provider.LabelInstallation), Values: []string{inst}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ins.Reservations {
		for _, in := range r.Instances {
			if in.State == nil || in.State.Name != types.InstanceStateNameTerminated {
				t.Errorf("moto still holds instance %s (%v)", awssdk.ToString(in.InstanceId), in.State)
			}
		}
	}
	sgs, err := raw.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{
		{Name: awssdk.String("group-name"), Values: []string{provider.ResourceName(vm)}}}})
	if err != nil || len(sgs.SecurityGroups) != 0 {
		t.Errorf("moto still holds security groups %+v (%v)", sgs, err)
	}
	keys, err := raw.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{Filters: []types.Filter{
		{Name: awssdk.String("key-name"), Values: []string{provider.ResourceName(vm)}}}})
	if err != nil || len(keys.KeyPairs) != 0 {
		t.Errorf("moto still holds key pairs %+v (%v)", keys, err)
	}
}
