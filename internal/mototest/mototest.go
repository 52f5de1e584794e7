// Package mototest runs moto's EC2 server for tests: Python moto's
// `moto_server`, an EC2 emulator the project did not write. One server is
// started per test binary, on a free loopback port, at the first URL call,
// and stopped by its pid when the tests end (Main). It validates instance
// types and AMIs (MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION,
// MOTO_ENABLE_AMI_VALIDATION), so RunInstances refuses what EC2 would.
// Without moto_server on PATH a test calling URL is skipped, or failed
// under CI=true, with InstallHint.
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(mototest.Main{M: m}) }
//
//	func TestSomething(t *testing.T) {
//		url := mototest.URL(t)
//		p, err := aws.New(aws.Config{Regions: []string{"us-east-1"}, Image: mototest.AMI},
//			aws.WithEndpoint(aws.Endpoint{URL: url, Client: mototest.Client,
//				AccessKeyID: mototest.KeyID, SecretAccessKey: mototest.Secret}))
//		...
//		raw := mototest.EC2(url) // moto's own view
//	}
//
// The server keeps its state for the life of the test binary: tests share
// it, so each should use names and installation ids of its own.
package mototest

import (
	"bytes"
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
)

// InstallHint is the message a test is skipped (or, under CI=true, failed)
// with when moto_server is not on PATH.
const InstallHint = "moto_server not found on PATH: install it with `pip install 'moto[server]==5.2.1'`"

// The fake credentials moto accepts, and an image it holds.
const (
	KeyID  = "AKIDMOTOTESTING"
	Secret = "moto-secret-testing"
	// AMI is an image moto holds in every region (Ubuntu 14.04 of its
	// default set, moto/ec2/resources/amis.json), so that RunInstances
	// passes moto's AMI validation.
	AMI = "ami-1e749f67"
)

var server struct {
	once    sync.Once
	cmd     *exec.Cmd
	url     string
	version string
	err     error
}

// env makes moto check what real EC2 checks: RunInstances refuses an
// instance type the region does not offer (InvalidInstanceType.NotFound)
// and an AMI it does not hold (InvalidAMIID.NotFound).
var env = []string{"MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION=true", "MOTO_ENABLE_AMI_VALIDATION=true"}

// URL returns the URL of the test binary's moto server, starting it on
// first use, and logs a "moto suite:" line naming moto's version. Outside
// CI a missing moto_server skips the test; under CI=true it fails it.
func URL(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("moto_server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(InstallHint)
		}
		t.Skip(InstallHint)
	}
	server.once.Do(start)
	if server.err != nil {
		t.Fatalf("moto: %v", server.err)
	}
	t.Logf("moto suite: running against moto %s's EC2 server at %s (%s)", server.version, server.url, strings.Join(env, " "))
	return server.url
}

// start runs moto_server on a free loopback port and waits, in real time,
// for it to answer.
func start() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		server.err = err
		return
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	server.cmd = exec.Command("moto_server", "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	server.cmd.Env = append(os.Environ(), env...)
	server.version = version()
	if err := server.cmd.Start(); err != nil {
		server.err = err
		return
	}
	server.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for { // the server's own start-up, polled in real time
		resp, err := Client.Get(server.url + "/moto-api/")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			server.err = fmt.Errorf("moto_server on port %d did not answer within 30s: %w", port, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Version is the version of the moto package the running server uses, or
// a note saying why it is unknown; "" before URL started the server.
func Version() string { return server.version }

// version returns the version of the moto package that moto_server runs,
// asking the Python its script names (python3 when it names none, as a
// pyenv shim does), or a note saying why it is unknown.
func version() string {
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

// Main is a test binary's tests with the moto server's stop added: Run
// runs them, then, if a test started the server, kills it by its pid.
type Main struct{ M *testing.M }

// Run runs the tests and stops the server.
func (m Main) Run() int {
	code := m.M.Run()
	if server.cmd != nil && server.cmd.Process != nil {
		_ = server.cmd.Process.Kill() // by its pid; its state is thrown away with it
		_ = server.cmd.Wait()         // the exit status of a killed server says nothing
	}
	return code
}

// Client is the HTTP client for moto: it keeps no idle connection, so none
// outlives the tests, and hands net/http each request body as an
// in-memory reader (InMemoryBody).
var Client = &http.Client{Transport: InMemoryBody{Next: &http.Transport{DisableKeepAlives: true}}}

// EC2 returns a raw EC2 client of the moto server at url in us-east-1
// (opts may change the region): the emulator's own view, beside the
// adapter's.
func EC2(url string, opts ...func(*ec2.Options)) *ec2.Client {
	return ec2.New(ec2.Options{Region: "us-east-1", BaseEndpoint: awssdk.String(url), HTTPClient: Client,
		Credentials: credentials.NewStaticCredentialsProvider(KeyID, Secret, "")}, opts...)
}

// InMemoryBody reads a request's body into memory before Next sends it.
// The SDK's body (smithy-go's safe read-closer) answers io.EOF as an error
// from WriteTo once the SDK has closed it, which the SDK does as soon as
// the answer's headers are in; net/http reads a body once more after its
// Content-Length bytes and, meeting that error there, closes the
// connection under the answer's body ("read tcp ...: use of closed network
// connection", about once in a few hundred calls under -race). An
// in-memory body is written with the headers and read past its end with
// no error. The AWS adapter classifies such a cut-short answer Transient,
// so the core retries it; tests that call the primitives without the core
// must not meet it.
type InMemoryBody struct{ Next http.RoundTripper }

// RoundTrip sends r with its body in memory.
func (t InMemoryBody) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return t.Next.RoundTrip(r)
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
	return t.Next.RoundTrip(c)
}
