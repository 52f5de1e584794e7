package aws

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
)

// The documented answers (testdata/notice/SOURCES.md cites each one).
func noticeFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "notice", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Every documented answer of spot/instance-action and
// events/recommendations/rebalance, as noticeCommand prints them, and the
// notice each becomes (EC2 User Guide, "Spot Instance interruption
// notices" and "EC2 instance rebalance recommendations").
func TestParseNotice(t *testing.T) {
	terminate := noticeFixture(t, "instance-action-terminate.json")
	stop := noticeFixture(t, "instance-action-stop.json")
	rebal := noticeFixture(t, "rebalance.json")
	at := time.Date(2017, 9, 18, 8, 22, 0, 0, time.UTC)
	preempt := func(action string) provider.Notice {
		return provider.Notice{Kind: provider.NoticePreempt, At: at, Detail: "spot instance-action: " + action}
	}
	recommended := provider.Notice{Kind: provider.NoticeRebalance, Detail: "rebalance recommendation at 2020-10-27T08:22:00Z"}
	for _, tc := range []struct {
		name    string
		out     string
		want    []provider.Notice
		wantErr string
	}{
		{"nothing announced", "instance-action 404 \nrebalance 404 \n", nil, ""},
		{"terminate", "instance-action 200 " + terminate + "\nrebalance 404 \n", []provider.Notice{preempt("terminate")}, ""},
		{"stop", "instance-action 200 " + stop + "\nrebalance 404 \n", []provider.Notice{preempt("stop")}, ""},
		{"hibernate", `instance-action 200 {"action": "hibernate", "time": "2017-09-18T08:22:00Z"}` + "\nrebalance 404 \n",
			[]provider.Notice{preempt("hibernate")}, ""},
		{"rebalance recommendation", "instance-action 404 \nrebalance 200 " + rebal + "\n", []provider.Notice{recommended}, ""},
		{"both, sections in any order", "rebalance 200 " + rebal + "\ninstance-action 200 " + terminate + "\n",
			[]provider.Notice{recommended, preempt("terminate")}, ""},
		{"empty output", "", nil, "no instance-action answer"},
		{"a section missing", "instance-action 404 \n", nil, "no rebalance answer"},
		{"token refused", "instance-action 401 \nrebalance 401 \n", nil, "HTTP 401 for instance-action"},
		{"IMDS unreachable", "instance-action 000 \nrebalance 000 \n", nil, "did not answer"},
		{"not JSON", "instance-action 200 <html>\nrebalance 404 \n", nil, "is not {\"action\", \"time\"}"},
		{"no action", `instance-action 200 {"time": "2017-09-18T08:22:00Z"}` + "\nrebalance 404 \n", nil, "is not {\"action\", \"time\"}"},
		{"rebalance not JSON", "instance-action 404 \nrebalance 200 {}\n", nil, "is not {\"noticeTime\"}"},
		{"unknown line", "instance-action 404 \nrebalance 404 \nsomething else\n", nil, "unexpected line"},
		{"a section twice", "instance-action 404 \ninstance-action 404 \nrebalance 404 \n", nil, "instance-action twice"},
		{"the other section still read", "instance-action 200 " + terminate + "\nrebalance 500 \n",
			[]provider.Notice{preempt("terminate")}, "HTTP 500 for rebalance"},
		{"an unreadable time is still a notice", `instance-action 200 {"action": "terminate", "time": "soon"}` + "\nrebalance 404 \n",
			[]provider.Notice{{Kind: provider.NoticePreempt, Detail: "spot instance-action: terminate"}}, "time \"soon\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseNotice([]byte(tc.out))
			if !slices.EqualFunc(got, tc.want, func(a, b provider.Notice) bool { return a == b }) {
				t.Errorf("notices %+v, want %+v", got, tc.want)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

// The probe is for spot instances only, with EC2's two minutes; its
// command is POSIX sh and holds none of the account's credentials.
func TestNoticeProbe(t *testing.T) {
	const keyID, secret, session = "AKIANOTICEEXAMPLE123", "noticeSecretKeyEXAMPLE/K7MDENG+bPxRfiCY", "FwoGZXIvYXdzNOTICEsessiontoken=="
	p, err := New(Config{Regions: []string{"us-east-1"}}, WithInstallation("inst-aws-1"), WithEndpoint(Endpoint{
		URL: "https://ec2.test/", Client: &http.Client{}, AccessKeyID: keyID, SecretAccessKey: secret, SessionToken: session}))
	if err != nil {
		t.Fatal(err)
	}
	target := provider.NoticeTarget{Name: "train-1", InstanceID: "i-0123456789abcdef0",
		Location: provider.Location{Region: "us-east-1", Zone: "use1-az4"}, Spot: true}
	probe, ok := p.NoticeProbe(target)
	if !ok || probe.Parse == nil || probe.Lead != 2*time.Minute || probe.Command != noticeCommand("http://169.254.169.254") {
		t.Fatalf("spot probe: %v %+v", ok, probe)
	}
	for _, s := range []string{keyID, secret, session} {
		if strings.Contains(probe.Command, s) {
			t.Errorf("the command holds a credential: %s", probe.Command)
		}
	}
	if out, err := exec.Command("sh", "-n", "-c", probe.Command).CombinedOutput(); err != nil {
		t.Errorf("sh -n: %v: %s", err, out)
	}
	target.Spot = false
	if _, ok := p.NoticeProbe(target); ok {
		t.Error("an on-demand instance got a probe")
	}
}

// imdsToken is the session token the fake IMDS hands out.
const imdsToken = "AQAEAnoticeTESTtokenEXAMPLE=="

// fakeIMDS answers the IMDSv2 requests of noticeCommand as the EC2 User
// Guide documents them: PUT latest/api/token with
// X-aws-ec2-metadata-token-ttl-seconds, then GETs with
// X-aws-ec2-metadata-token (401 without it), each item 200 with its JSON
// or 404 with an HTML page.
type fakeIMDS struct {
	t        *testing.T
	notFound string

	mu        sync.Mutex
	items     map[string]string // path under latest/meta-data/ → body
	refuse    bool              // answer every GET 401
	tokenPuts int
}

func (f *fakeIMDS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path == "/latest/api/token" {
		ttl, err := strconv.Atoi(r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
		if r.Method != http.MethodPut || err != nil || ttl < 1 || ttl > 21600 {
			f.t.Errorf("token request %s with TTL %q", r.Method, r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		f.tokenPuts++
		_, _ = w.Write([]byte(imdsToken))
		return
	}
	item, ok := strings.CutPrefix(r.URL.Path, "/latest/meta-data/")
	if !ok || r.Method != http.MethodGet {
		f.t.Errorf("unexpected %s %s", r.Method, r.URL)
		http.NotFound(w, r)
		return
	}
	if f.refuse || r.Header.Get("X-aws-ec2-metadata-token") != imdsToken {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if body, ok := f.items[item]; ok {
		_, _ = w.Write([]byte(body))
		return
	}
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write([]byte(f.notFound))
}

func (f *fakeIMDS) set(items map[string]string, refuse bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items, f.refuse = items, refuse
}

// runProbe runs command as the core does on the machine: in a POSIX
// shell, inside a brace group, stderr left out.
func runProbe(t *testing.T, command string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", "{ "+command+"\n}")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the probe's command failed: %v (output %q)", err, out)
	}
	return out
}

// The real command, under sh with the machine's curl, against a fake IMDS:
// nothing announced, a termination, a rebalance recommendation beside
// it, a token refused, an IMDS that does not answer.
func TestNoticeCommandAgainstIMDS(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed here: the probe's command runs curl, so it cannot run without it")
	}
	f := &fakeIMDS{t: t, notFound: noticeFixture(t, "not-found.html")}
	srv := httptest.NewServer(f)
	defer srv.Close()
	command := noticeCommand(srv.URL)
	terminate := noticeFixture(t, "instance-action-terminate.json")

	f.set(nil, false)
	out := runProbe(t, command)
	if got, err := parseNotice(out); len(got) != 0 || err != nil {
		t.Errorf("nothing announced: %+v, %v (output %q)", got, err, out)
	}
	if strings.Contains(string(out), "Not Found") || strings.Contains(string(out), imdsToken) {
		t.Errorf("the output carries the 404 page or the token: %q", out)
	}

	f.set(map[string]string{"spot/instance-action": terminate}, false)
	got, err := parseNotice(runProbe(t, command))
	want := provider.Notice{Kind: provider.NoticePreempt, At: time.Date(2017, 9, 18, 8, 22, 0, 0, time.UTC), Detail: "spot instance-action: terminate"}
	if err != nil || len(got) != 1 || got[0] != want {
		t.Errorf("terminate: %+v, %v", got, err)
	}

	f.set(map[string]string{"spot/instance-action": terminate, "events/recommendations/rebalance": noticeFixture(t, "rebalance.json")}, false)
	got, err = parseNotice(runProbe(t, command))
	if err != nil || len(got) != 2 || got[1].Kind != provider.NoticeRebalance {
		t.Errorf("terminate and rebalance: %+v, %v", got, err)
	}

	f.set(nil, true)
	if got, err := parseNotice(runProbe(t, command)); len(got) != 0 || err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("token refused: %+v, %v", got, err)
	}
	f.mu.Lock()
	puts := f.tokenPuts
	f.mu.Unlock()
	if puts != 4 {
		t.Errorf("%d token requests for 4 runs, want one each", puts)
	}

	srv.Close()
	if got, err := parseNotice(runProbe(t, command)); len(got) != 0 || err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("IMDS gone: %+v, %v", got, err)
	}
}
