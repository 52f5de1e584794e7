package azure

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
)

const (
	noticeSub  = "00000000-1111-2222-3333-444444444444"
	noticeVMID = "/subscriptions/" + noticeSub + "/resourceGroups/gpuprov-inst-eastus/providers/Microsoft.Compute/virtualMachines/gpuprov-train-1-1"
)

// The documented answers (testdata/notice/SOURCES.md cites each one).
func eventsFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "notice", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// noticeProbe is the probe of VM train-1's instance gpuprov-train-1-1.
func noticeProbe(t *testing.T, target provider.NoticeTarget) provider.NoticeProbe {
	t.Helper()
	p := &Provider{cfg: Config{SubscriptionID: noticeSub}}
	probe, ok := p.NoticeProbe(target)
	if !ok {
		t.Fatalf("no probe for %+v", target)
	}
	return probe
}

var trainTarget = provider.NoticeTarget{Name: "train-1", InstanceID: noticeVMID, Location: provider.Location{Region: "eastus"}, Spot: true}

// Every documented Scheduled Events document, and the notice each is for
// the VM gpuprov-train-1-1 (Scheduled Events for Linux VMs, "Query for
// events", "Event properties", "Example responses").
func TestParseScheduledEvents(t *testing.T) {
	probe := noticeProbe(t, trainTarget)
	notBefore := time.Date(2016, 9, 19, 18, 29, 47, 0, time.UTC)
	preempt := eventsFixture(t, "preempt.json")
	// another replaces fields of the preempt document's event (pairs of
	// old and new text).
	another := func(pairs ...string) string { return strings.NewReplacer(pairs...).Replace(preempt) }
	for _, tc := range []struct {
		name    string
		out     string
		want    []provider.Notice
		wantErr string
	}{
		{"no events", eventsFixture(t, "no-events.json"), nil, ""},
		{"a freeze is no interruption", strings.ReplaceAll(eventsFixture(t, "freeze-scheduled.json"), "WestNO_0", "gpuprov-train-1-1"), nil, ""},
		{"another VM's events", eventsFixture(t, "freeze-started.json"), nil, ""},
		{"preempt", preempt, []provider.Notice{{Kind: provider.NoticePreempt, At: notBefore,
			Detail: "Preempt f020ba2e-3bc0-4c40-a10b-86575a9eabd5 (Scheduled, Platform)",
			Ack:    ackCommand(imdsBase, "f020ba2e-3bc0-4c40-a10b-86575a9eabd5")}}, ""},
		{"a user's reboot", eventsFixture(t, "reboot-user.json"), []provider.Notice{{Kind: provider.NoticeMaintenance, At: notBefore,
			Detail: "Reboot 5DD55B64-45AD-49D3-BBC9-F57D4EA97BD7 (Scheduled, User): Virtual machine is going to be restarted as requested by authorized user.",
			Ack:    ackCommand(imdsBase, "5DD55B64-45AD-49D3-BBC9-F57D4EA97BD7")}}, ""},
		{"redeploy", another(`"Preempt"`, `"Redeploy"`), []provider.Notice{{Kind: provider.NoticeMaintenance, At: notBefore,
			Detail: "Redeploy f020ba2e-3bc0-4c40-a10b-86575a9eabd5 (Scheduled, Platform)",
			Ack:    ackCommand(imdsBase, "f020ba2e-3bc0-4c40-a10b-86575a9eabd5")}}, ""},
		{"terminate", another(`"Preempt"`, `"Terminate"`), []provider.Notice{{Kind: provider.NoticeMaintenance, At: notBefore,
			Detail: "Terminate f020ba2e-3bc0-4c40-a10b-86575a9eabd5 (Scheduled, Platform)",
			Ack:    ackCommand(imdsBase, "f020ba2e-3bc0-4c40-a10b-86575a9eabd5")}}, ""},
		{"started: no time, nothing to approve", another(`"Scheduled"`, `"Started"`, `"Mon, 19 Sep 2016 18:29:47 GMT"`, `""`), []provider.Notice{{Kind: provider.NoticePreempt,
			Detail: "Preempt f020ba2e-3bc0-4c40-a10b-86575a9eabd5 (Started, Platform)"}}, ""},
		{"shared with another VM: not approved", another(`["gpuprov-train-1-1"]`, `["gpuprov-train-1-1", "gpuprov-other-1"]`),
			[]provider.Notice{{Kind: provider.NoticePreempt, At: notBefore, Detail: "Preempt f020ba2e-3bc0-4c40-a10b-86575a9eabd5 (Scheduled, Platform)"}}, ""},
		{"names compare as Azure does, without case", another(`["gpuprov-train-1-1"]`, `["GPUPROV-TRAIN-1-1"]`),
			[]provider.Notice{{Kind: provider.NoticePreempt, At: notBefore,
				Detail: "Preempt f020ba2e-3bc0-4c40-a10b-86575a9eabd5 (Scheduled, Platform)",
				Ack:    ackCommand(imdsBase, "f020ba2e-3bc0-4c40-a10b-86575a9eabd5")}}, ""},
		{"the VM's earlier attempt", another(`["gpuprov-train-1-1"]`, `["gpuprov-train-1-2"]`), nil, ""},
		{"an EventId that is not a GUID is refused", another(`f020ba2e-3bc0-4c40-a10b-86575a9eabd5`, `x\"}]}' ; echo injected ; echo '`),
			nil, "is not a GUID"},
		{"an undocumented type", another(`"Preempt"`, `"Hibernate"`), nil, `EventType "Hibernate"`},
		{"an unreadable NotBefore is still a notice", another(`Mon, 19 Sep 2016 18:29:47 GMT`, `soon`), []provider.Notice{{Kind: provider.NoticePreempt,
			Detail: "Preempt f020ba2e-3bc0-4c40-a10b-86575a9eabd5 (Scheduled, Platform)",
			Ack:    ackCommand(imdsBase, "f020ba2e-3bc0-4c40-a10b-86575a9eabd5")}}, `NotBefore "soon"`},
		{"no answer", "gpuprov-no-answer 22\n", nil, "no document (curl exit status 22)"},
		{"not JSON", "<html>Bad Request</html>", nil, "not its documented JSON"},
		{"no Events", `{"DocumentIncarnation": 1}`, nil, "no DocumentIncarnation or Events"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := probe.Parse([]byte(tc.out))
			if len(got) != len(tc.want) {
				t.Fatalf("notices %+v, want %+v (err %v)", got, tc.want, err)
			}
			for i := range got {
				if !got[i].At.Equal(tc.want[i].At) || got[i].Kind != tc.want[i].Kind || got[i].Detail != tc.want[i].Detail || got[i].Ack != tc.want[i].Ack {
					t.Errorf("notice %d: %+v, want %+v", i, got[i], tc.want[i])
				}
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

// The documented Freeze example names its VMs WestNO_0 and WestNO_1; its
// NotBefore ("Mon, 11 Apr 2026 22:26:58 GMT", a Saturday) parses.
func TestParseScheduledEventsOfTheExampleVMs(t *testing.T) {
	doc := strings.Replace(eventsFixture(t, "freeze-scheduled.json"), `"Freeze"`, `"Reboot"`, 1)
	ours := func(r string) bool { return r == "WestNO_1" }
	got, err := parseScheduledEvents([]byte(doc), ours, imdsBase)
	if err != nil || len(got) != 1 || !got[0].At.Equal(time.Date(2026, 4, 11, 22, 26, 58, 0, time.UTC)) || got[0].Ack != "" {
		t.Fatalf("%+v, %v; want one Reboot at its NotBefore, not approved (it names WestNO_0 too)", got, err)
	}
}

// Every VM gets a probe; a target without a VM id is matched by the name
// Create gives (gpuprov-<vm>-<attempt>); one with neither gets none. The
// command and the approval are POSIX sh and hold no credential: the
// endpoint is unauthenticated (the Metadata header is a guard, not a
// secret).
func TestNoticeProbe(t *testing.T) {
	for _, spot := range []bool{true, false} {
		target := trainTarget
		target.Spot = spot
		probe := noticeProbe(t, target)
		if probe.Lead != 30*time.Second || probe.Command != noticeCommand("http://169.254.169.254") {
			t.Fatalf("spot %v: %+v", spot, probe)
		}
	}
	byName := noticeProbe(t, provider.NoticeTarget{Name: "train-1", InstanceID: "not-an-id"})
	for _, tc := range []struct {
		resource string
		want     int
	}{{"gpuprov-train-1-3", 1}, {"gpuprov-train-1-x", 0}, {"gpuprov-train-10-1", 0}, {"gpuprov-train-1-", 0}} {
		got, err := byName.Parse([]byte(strings.Replace(eventsFixture(t, "preempt.json"), "gpuprov-train-1-1", tc.resource, 1)))
		if err != nil || len(got) != tc.want {
			t.Errorf("by name, %s: %+v, %v; want %d", tc.resource, got, err, tc.want)
		}
	}
	if _, ok := (&Provider{cfg: Config{SubscriptionID: noticeSub}}).NoticeProbe(provider.NoticeTarget{}); ok {
		t.Error("a probe for a target with no id and no name")
	}
	ack := ackCommand(imdsBase, "f020ba2e-3bc0-4c40-a10b-86575a9eabd5")
	for _, c := range []string{noticeCommand(imdsBase), ack} {
		if strings.Contains(c, noticeSub) || strings.Contains(strings.ToLower(c), "authorization") || strings.Contains(strings.ToLower(c), "bearer") {
			t.Errorf("the command holds more than the endpoint: %s", c)
		}
		if out, err := exec.Command("sh", "-n", "-c", c).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v: %s", c, err, out)
		}
	}
}

// fakeScheduledEvents answers as the page documents: 400 without
// Metadata: true; GET the document; POST {"StartRequests": [{"EventId"}]}
// approves (200 for a known event, 400 for a malformed body).
type fakeScheduledEvents struct {
	t *testing.T

	mu       sync.Mutex
	doc      string
	approved []string
}

func (f *fakeScheduledEvents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Metadata") != "true" {
		f.t.Errorf("%s %s without Metadata: true", r.Method, r.URL)
		http.Error(w, "Bad Request", http.StatusBadRequest)
		return
	}
	if r.URL.Path != "/metadata/scheduledevents" || r.URL.Query().Get("api-version") != "2020-07-01" {
		f.t.Errorf("unexpected %s %s", r.Method, r.URL)
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		_, _ = io.WriteString(w, f.doc)
	case http.MethodPost:
		var req struct {
			StartRequests []struct {
				EventID string `json:"EventId"`
			}
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil || len(req.StartRequests) == 0 {
			f.t.Errorf("approval body %q", body)
			http.Error(w, "Bad Request", http.StatusBadRequest)
			return
		}
		for _, s := range req.StartRequests {
			f.approved = append(f.approved, s.EventID)
		}
	default:
		f.t.Errorf("unexpected %s", r.Method)
	}
}

// runShell runs command as the core does on the machine: in a POSIX
// shell, inside a brace group, stderr left out.
func runShell(t *testing.T, command string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sh", "-c", "{ "+command+"\n}").Output()
	if err != nil {
		t.Fatalf("%q failed: %v (output %q)", command, err, out)
	}
	return out
}

// The real command and approval, under sh with the machine's curl,
// against a fake Scheduled Events endpoint: no events, a preemption (read,
// then approved by its Ack), no endpoint.
func TestNoticeCommandAgainstScheduledEvents(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed here: the probe's command runs curl, so it cannot run without it")
	}
	f := &fakeScheduledEvents{t: t, doc: eventsFixture(t, "no-events.json")}
	srv := httptest.NewServer(f)
	defer srv.Close()
	ours := func(r string) bool { return r == "gpuprov-train-1-1" }

	out := runShell(t, noticeCommand(srv.URL))
	if got, err := parseScheduledEvents(out, ours, srv.URL); len(got) != 0 || err != nil {
		t.Errorf("no events: %+v, %v (output %q)", got, err, out)
	}

	f.mu.Lock()
	f.doc = eventsFixture(t, "preempt.json")
	f.mu.Unlock()
	got, err := parseScheduledEvents(runShell(t, noticeCommand(srv.URL)), ours, srv.URL)
	if err != nil || len(got) != 1 || got[0].Kind != provider.NoticePreempt || got[0].Ack == "" {
		t.Fatalf("preempt: %+v, %v", got, err)
	}
	runShell(t, got[0].Ack)
	f.mu.Lock()
	approved := f.approved
	f.mu.Unlock()
	if len(approved) != 1 || approved[0] != "f020ba2e-3bc0-4c40-a10b-86575a9eabd5" {
		t.Errorf("approved %q, want the preempt event", approved)
	}

	srv.Close()
	if got, err := parseScheduledEvents(runShell(t, noticeCommand(srv.URL)), ours, srv.URL); len(got) != 0 || err == nil || !strings.Contains(err.Error(), "no document") {
		t.Errorf("no endpoint: %+v, %v", got, err)
	}
}
