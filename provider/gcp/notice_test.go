package gcp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
)

// The documented values, inline: instance/preempted is "TRUE" when the VM
// was preempted, else "FALSE" (https://cloud.google.com/compute/docs/instances/create-use-spot,
// "Detect preemption"; https://cloud.google.com/compute/docs/instances/create-use-preemptible);
// instance/maintenance-event is "NONE", "MIGRATE_ON_HOST_MAINTENANCE" or
// "TERMINATE_ON_HOST_MAINTENANCE", and changes 60 seconds before a
// maintenance event starts for a VM set to migrate or with a GPU attached
// (https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice;
// Google's sample GoogleCloudPlatform/python-docs-samples
// compute/metadata/main.py compares the answer with 'NONE').
const (
	docPreempted    = "TRUE"
	docNotPreempted = "FALSE"
	docNoEvent      = "NONE"
	docMigrate      = "MIGRATE_ON_HOST_MAINTENANCE"
	docTerminate    = "TERMINATE_ON_HOST_MAINTENANCE"
)

func TestParseNotice(t *testing.T) {
	out := func(p, m string) string { return "preempted " + p + "\nmaintenance-event " + m + "\n" }
	preempt := provider.Notice{Kind: provider.NoticePreempt, Detail: "instance/preempted TRUE"}
	maint := provider.Notice{Kind: provider.NoticeMaintenance, Detail: "instance/maintenance-event TERMINATE_ON_HOST_MAINTENANCE"}
	for _, tc := range []struct {
		name    string
		out     string
		want    []provider.Notice
		wantErr string
	}{
		{"nothing announced", out(docNotPreempted, docNoEvent), nil, ""},
		{"preempted", out(docPreempted, docNoEvent), []provider.Notice{preempt}, ""},
		{"terminate on host maintenance", out(docNotPreempted, docTerminate), []provider.Notice{maint}, ""},
		{"live migration stops nothing", out(docNotPreempted, docMigrate), nil, ""},
		{"both", out(docPreempted, docTerminate), []provider.Notice{preempt, maint}, ""},
		{"no answer", out("", ""), nil, "did not answer for instance/preempted"},
		{"empty output", "", nil, "no preempted line"},
		{"a line missing", "preempted FALSE\n", nil, "no maintenance-event line"},
		{"an undocumented value", out("yes", docNoEvent), nil, `instance/preempted is "yes"`},
		{"the old sample's value", out(docNotPreempted, "SHUTDOWN_ON_HOST_MAINTENANCE"), nil, "not a documented value"},
		{"unknown line", out(docNotPreempted, docNoEvent) + "zone x\n", nil, "unexpected line"},
		{"a key twice", "preempted FALSE\npreempted FALSE\nmaintenance-event NONE\n", nil, "preempted twice"},
		{"the other key still read", out(docPreempted, ""), []provider.Notice{preempt}, "did not answer for instance/maintenance-event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseNotice([]byte(tc.out))
			if !slices.Equal(got, tc.want) {
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

// Every VM gets the probe (maintenance is announced to on-demand GPU VMs
// too), with the 30 s of a preemption. Its command is POSIX sh, reads the
// two keys only: never the instance/ directory recursively (its attributes
// hold user-data, and the user-data the VM's private host key) nor a
// service account's token.
func TestNoticeProbe(t *testing.T) {
	p := &Provider{}
	for _, spot := range []bool{true, false} {
		probe, ok := p.NoticeProbe(provider.NoticeTarget{Name: "train-1", InstanceID: "1234567890123456789",
			Location: provider.Location{Region: "us-central1", Zone: "us-central1-a"}, Spot: spot})
		if !ok || probe.Parse == nil || probe.Lead != 30*time.Second || probe.Command != noticeCommand("http://metadata.google.internal") {
			t.Fatalf("spot %v: %v %+v", spot, ok, probe)
		}
	}
	command := noticeCommand(metadataBase)
	for _, s := range []string{"recursive", "attributes", "service-accounts", "token", "user-data"} {
		if strings.Contains(command, s) {
			t.Errorf("the command reads %q: %s", s, command)
		}
	}
	if out, err := exec.Command("sh", "-n", "-c", command).CombinedOutput(); err != nil {
		t.Errorf("sh -n: %v: %s", err, out)
	}
}

// fakeMetadata answers the instance keys as the metadata server does:
// 403 without Metadata-Flavor: Google; wait_for_change=true holds the
// answer until the value changes or timeout_sec passes, then answers the
// value as it is.
type fakeMetadata struct {
	t *testing.T

	mu      sync.Mutex
	values  map[string]string
	changed chan struct{} // closed, and replaced, on every change
	polls   int
	onPoll  func() // runs once a long poll waits, if set
}

func newFakeMetadata(t *testing.T, preempted, event string) *fakeMetadata {
	return &fakeMetadata{t: t, values: map[string]string{keyPreempted: preempted, keyMaintenance: event}, changed: make(chan struct{})}
}

func (f *fakeMetadata) set(key, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.values[key] = value
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeMetadata) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Metadata-Flavor") != "Google" {
		f.t.Errorf("%s without Metadata-Flavor: Google", r.URL)
		http.Error(w, "Missing Metadata-Flavor:Google header.", http.StatusForbidden)
		return
	}
	key, ok := strings.CutPrefix(r.URL.Path, "/computeMetadata/v1/instance/")
	f.mu.Lock()
	_, known := f.values[key]
	changed := f.changed
	f.mu.Unlock()
	if !ok || !known || r.URL.Query().Has("recursive") {
		f.t.Errorf("unexpected request %s", r.URL)
		http.NotFound(w, r)
		return
	}
	if r.URL.Query().Get("wait_for_change") == "true" {
		secs, err := strconv.Atoi(r.URL.Query().Get("timeout_sec"))
		if err != nil || secs < 1 || secs > 5 {
			f.t.Errorf("long poll %s: timeout_sec should be a short whole number of seconds", r.URL)
			secs = 5
		}
		f.mu.Lock()
		f.polls++
		hook := f.onPoll
		f.mu.Unlock()
		if hook != nil {
			hook()
		}
		select {
		case <-changed:
		case <-time.After(time.Duration(secs) * time.Second):
		case <-r.Context().Done():
			return
		}
	}
	f.mu.Lock()
	v := f.values[key]
	f.mu.Unlock()
	w.Header().Set("Metadata-Flavor", "Google")
	w.Header().Set("Content-Type", "application/text")
	_, _ = w.Write([]byte(v))
}

// runProbe runs command as the core does on the machine: in a POSIX
// shell, inside a brace group, stderr left out.
func runProbe(t *testing.T, command string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sh", "-c", "{ "+command+"\n}").Output()
	if err != nil {
		t.Fatalf("the probe's command failed: %v (output %q)", err, out)
	}
	return out
}

// The real command, under sh with the machine's curl, against a fake
// metadata server: nothing announced (the long poll runs out), a
// preemption during the long poll (the command returns at once), a
// maintenance notice already there (no long poll), no server.
func TestNoticeCommandAgainstMetadataServer(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed here: the probe's command runs curl, so it cannot run without it")
	}
	f := newFakeMetadata(t, docNotPreempted, docNoEvent)
	srv := httptest.NewServer(f)
	defer srv.Close()
	command := noticeCommand(srv.URL)
	polls := func() int { f.mu.Lock(); defer f.mu.Unlock(); return f.polls }

	start := time.Now()
	out := runProbe(t, command)
	if got, err := parseNotice(out); len(got) != 0 || err != nil {
		t.Errorf("nothing announced: %+v, %v (output %q)", got, err, out)
	}
	if d := time.Since(start); polls() != 1 || d < pollSeconds*time.Second {
		t.Errorf("nothing announced: %d long polls, returned after %v; want one, of %ds", polls(), d, pollSeconds)
	}

	f.mu.Lock()
	f.onPoll = func() { f.set(keyPreempted, docPreempted) } // the preemption comes while the poll waits
	f.mu.Unlock()
	start = time.Now()
	got, err := parseNotice(runProbe(t, command))
	f.mu.Lock()
	f.onPoll = nil
	f.mu.Unlock()
	if err != nil || len(got) != 1 || got[0].Kind != provider.NoticePreempt {
		t.Errorf("preempted during the poll: %+v, %v", got, err)
	}
	if d := time.Since(start); d >= pollSeconds*time.Second {
		t.Errorf("a preemption during the long poll was printed after %v, not when it came", d)
	}

	f.set(keyPreempted, docNotPreempted)
	f.set(keyMaintenance, docTerminate)
	before := polls()
	got, err = parseNotice(runProbe(t, command))
	if err != nil || len(got) != 1 || got[0].Kind != provider.NoticeMaintenance || polls() != before {
		t.Errorf("maintenance announced: %+v, %v, %d more long polls", got, err, polls()-before)
	}

	srv.Close()
	if got, err := parseNotice(runProbe(t, command)); len(got) != 0 || err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("no metadata server: %+v, %v", got, err)
	}
}
