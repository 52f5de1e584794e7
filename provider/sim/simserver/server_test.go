package simserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// start runs a server with cloud "c1" on a fake clock: instant API, boot 3s,
// delete 1s, retention 1h.
func start(t *testing.T, mutate func(*Options)) (*Server, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(t0)
	timing := Timing{BootTime: Duration(3 * time.Second), DeleteTime: Duration(time.Second)}
	opts := Options{Clock: clk, DisableSSH: true, Clouds: []CloudConfig{{Name: "c1", Timing: &timing}}}
	if mutate != nil {
		mutate(&opts)
	}
	s, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, clk
}

// request sends one API call and decodes the JSON answer into out.
func request(t *testing.T, s *Server, method, path, token string, in, out any) *http.Response {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.URL()+path, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return resp
}

func create(t *testing.T, s *Server, name string, labels map[string]string) Instance {
	t.Helper()
	var in Instance
	resp := request(t, s, "POST", "/clouds/c1/v1/instances", s.APIKey("c1"),
		map[string]any{"offer_id": "a-t4x1-euw1b", "name": name, "labels": labels}, &in)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	return in
}

func TestAuthAndErrorBodies(t *testing.T) {
	s, _ := start(t, nil)
	for _, tc := range []struct {
		method, path, token string
		body                any
		status              int
		code                string
	}{
		{"GET", "/clouds/c1/v1/offers", "wrong", nil, 401, CodeUnauthorized},
		{"GET", "/clouds/c1/v1/offers", "", nil, 401, CodeUnauthorized},
		{"GET", "/clouds/nope/v1/offers", "x", nil, 404, CodeNotFound},
		{"GET", "/clouds/c1/v1/instances/i-none", s.APIKey("c1"), nil, 404, CodeNotFound},
		{"DELETE", "/clouds/c1/v1/instances/i-none", s.APIKey("c1"), nil, 404, CodeNotFound},
		{"POST", "/clouds/c1/v1/instances", s.APIKey("c1"), map[string]any{"offer_id": "nope", "name": "x"}, 400, CodeInvalidRequest},
		{"POST", "/clouds/c1/v1/instances", s.APIKey("c1"), map[string]any{"offer_id": "a-t4x1-euw1b", "name": "x", "colour": "red"}, 400, CodeInvalidRequest},
		{"POST", "/clouds/c1/v1/instances", s.APIKey("c1"), map[string]any{"offer_id": "a-t4x1-euw1b", "name": "x", "user_data": "#cloud-config\nssh_keys: [\n"}, 400, CodeInvalidRequest},
		{"POST", "/clouds/c1/v1/instances", s.APIKey("c1"), map[string]any{"offer_id": "a-t4x1-euw1b", "name": "x", "firewall": "fw"}, 400, CodeUnknownFirewall},
		{"PUT", "/clouds/c1/v1/firewalls/fw", s.APIKey("c1"), map[string]any{"ports": []any{}}, 400, CodeInvalidRequest},
		{"PUT", "/clouds/c1/v1/firewalls/fw?region=r", s.APIKey("c1"), map[string]any{"ports": []any{map[string]any{"number": 0, "protocol": "tcp"}}}, 400, CodeInvalidRequest},
		{"DELETE", "/clouds/c1/v1/ssh-keys/k", s.APIKey("c1"), nil, 404, CodeNotFound},
		{"GET", "/admin/clouds", "wrong", nil, 401, CodeUnauthorized},
		{"GET", "/admin/clouds/nope/stats", s.AdminToken(), nil, 404, CodeNotFound},
	} {
		var eb errorBody
		resp := request(t, s, tc.method, tc.path, tc.token, tc.body, &eb)
		if resp.StatusCode != tc.status || eb.Error.Code != tc.code || eb.Error.Message == "" {
			t.Errorf("%s %s: %d %+v, want %d %s", tc.method, tc.path, resp.StatusCode, eb, tc.status, tc.code)
		}
	}
}

func TestListPaginatesAndFiltersByLabel(t *testing.T) {
	s, _ := start(t, nil)
	for i := 0; i < 7; i++ {
		team := "a"
		if i%2 == 1 {
			team = "b"
		}
		create(t, s, "vm", map[string]string{"team": team, "x": "1"})
	}
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		var page instanceList
		path := "/clouds/c1/v1/instances?label=team=a&label=x=1&limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		if resp := request(t, s, "GET", path, s.APIKey("c1"), nil, &page); resp.StatusCode != 200 || pages > 5 {
			t.Fatalf("page %d: %d", pages, resp.StatusCode)
		}
		for _, in := range page.Instances {
			if in.Labels["team"] != "a" {
				t.Fatalf("label filter let %+v through", in.Labels)
			}
			ids = append(ids, in.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if len(ids) != 4 || !(ids[0] < ids[1] && ids[1] < ids[2] && ids[2] < ids[3]) {
		t.Fatalf("ids %v: want 4, sorted, no repeats", ids)
	}
}

func TestTerminatedInstanceIsRetainedThenPurged(t *testing.T) {
	s, clk := start(t, nil)
	in := create(t, s, "vm", nil)
	var got Instance
	request(t, s, "DELETE", "/clouds/c1/v1/instances/"+in.ID, s.APIKey("c1"), nil, &got)
	if got.Status != StatusStopping {
		t.Fatalf("after delete: %s", got.Status)
	}
	clk.Advance(time.Second)
	request(t, s, "GET", "/clouds/c1/v1/instances/"+in.ID, s.APIKey("c1"), nil, &got)
	if got.Status != StatusTerminated || got.TerminatedAt.IsZero() || got.Events[len(got.Events)-1].Type != EventTerminated {
		t.Fatalf("terminated: %+v", got)
	}
	var list instanceList
	request(t, s, "GET", "/clouds/c1/v1/instances?include_terminated=true", s.APIKey("c1"), nil, &list)
	if len(list.Instances) != 1 {
		t.Fatalf("include_terminated listed %d", len(list.Instances))
	}
	clk.Advance(time.Hour)
	if resp := request(t, s, "GET", "/clouds/c1/v1/instances/"+in.ID, s.APIKey("c1"), nil, nil); resp.StatusCode != 404 {
		t.Fatalf("after retention: %d", resp.StatusCode)
	}
}

func TestAdminAPI(t *testing.T) {
	s, clk := start(t, nil)
	tok := s.AdminToken()
	var f Faults
	resp := request(t, s, "PUT", "/admin/clouds/c1/faults", tok, map[string]any{"stockout_regions": []string{"*"}, "retry_after": "3s"}, &f)
	if resp.StatusCode != 200 || f.RetryAfter != Duration(3*time.Second) {
		t.Fatalf("put faults: %d %+v", resp.StatusCode, f)
	}
	var eb errorBody
	request(t, s, "POST", "/clouds/c1/v1/instances", s.APIKey("c1"), map[string]any{"offer_id": "a-t4x1-euw1b", "name": "x"}, &eb)
	if eb.Error.Code != CodeOutOfCapacity {
		t.Fatalf("create under stockout: %+v", eb)
	}
	if err := s.SetFaults("c1", Faults{}); err != nil {
		t.Fatal(err)
	}
	in := create(t, s, "vm", nil)
	if resp := request(t, s, "POST", "/admin/clouds/c1/instances/"+in.ID+"/preempt", tok, nil, &eb); resp.StatusCode != 409 {
		t.Fatalf("preempt while provisioning: %d", resp.StatusCode)
	}
	clk.Advance(3 * time.Second)
	var got Instance
	if resp := request(t, s, "POST", "/admin/clouds/c1/instances/"+in.ID+"/preempt", tok, nil, &got); resp.StatusCode != 200 || got.Status != StatusPreempted {
		t.Fatalf("preempt: %d %+v", resp.StatusCode, got)
	}
	var st Stats
	request(t, s, "GET", "/admin/clouds/c1/stats", tok, nil, &st)
	if st.Creates != 1 || st.Preemptions != 1 || st.Calls["create_instance"] != 2 || st.Errors[CodeOutOfCapacity] != 1 {
		t.Fatalf("stats %+v", st)
	}
	if resp := request(t, s, "PUT", "/admin/clouds/c1/faults", tok, map[string]any{"error_rate": 2}, nil); resp.StatusCode != 400 {
		t.Fatalf("a probability of 2: %d", resp.StatusCode)
	}
}

func TestStartRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:80"} {
		if s, err := Start(Options{Addr: addr}); err == nil {
			s.Close()
			t.Errorf("Start on %q succeeded", addr)
		}
	}
}

func TestLoadOptions(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"sim.json": `{"seed": 7, "clouds": [{"name": "x", "timing": {"boot_time": "2s"}, "faults": {"listing_lag": "1.5s", "stockout_offers": ["o1"]}}]}`,
		"sim.toml": "seed = 7\n[[clouds]]\nname = \"x\"\n[clouds.timing]\nboot_time = \"2s\"\n[clouds.faults]\nlisting_lag = \"1.5s\"\nstockout_offers = [\"o1\"]\n",
	}
	for name, text := range files {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(text), 0o600)
		o, err := LoadOptions(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c := o.Clouds[0]
		if o.Seed != 7 || c.Name != "x" || c.Timing.BootTime != Duration(2*time.Second) ||
			c.Faults.ListingLag != Duration(1500*time.Millisecond) || c.Faults.StockoutOffers[0] != "o1" {
			t.Fatalf("%s: %+v %+v", name, o, c)
		}
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[[clouds]]\nname = \"x\"\ncolour = \"red\"\n"), 0o600)
	if _, err := LoadOptions(bad); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestDefaultOptionsCatalogs(t *testing.T) {
	gpus := map[string]bool{}
	for _, n := range provider.GPUNames() {
		gpus[n] = true
	}
	var cheapest [2]struct {
		cloud string
		price float64
	}
	for _, c := range DefaultOptions().Clouds {
		for _, of := range c.Offers {
			if !gpus[of.GPU] {
				t.Errorf("%s: %s is not a canonical GPU name", of.ID, of.GPU)
			}
			if of.GPU != "H100-80GB" || of.GPUCount != 1 || of.Spot {
				continue
			}
			switch {
			case cheapest[0].cloud == "" || of.PricePerHour < cheapest[0].price:
				cheapest[1], cheapest[0] = cheapest[0], struct {
					cloud string
					price float64
				}{c.Name, of.PricePerHour}
			case cheapest[1].cloud == "" || of.PricePerHour < cheapest[1].price:
				cheapest[1].cloud, cheapest[1].price = c.Name, of.PricePerHour
			}
		}
	}
	if cheapest[0].cloud == cheapest[1].cloud {
		t.Fatalf("the two cheapest H100 offers are both on %s", cheapest[0].cloud)
	}
}

// TestRealClockBootsWithSSH runs the defaults on the wall clock: the boot
// timers fire on their own and the instance gets an SSH port.
func TestRealClockBootsWithSSH(t *testing.T) {
	s, err := Start(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var in Instance
	request(t, s, "POST", "/clouds/sim-b/v1/instances", s.APIKey("sim-b"), map[string]any{"offer_id": "b-t4-1", "name": "vm"}, &in)
	deadline := time.Now().Add(10 * time.Second)
	for {
		all, _ := s.Instances("sim-b")
		if len(all) == 1 && all[0].Status == StatusRunning {
			if all[0].SSH == nil || all[0].SSH.Port == 0 || all[0].HostKey == "" {
				t.Fatalf("running without SSH: %+v", all[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not running after 10s: %+v", all)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// label_any keeps the instances whose label has one of the values given
// for its key, beside label's exact filters; the label index that answers
// it follows creates and purges, and agrees with a scan of every instance.
func TestListFiltersOnAnyOfALabelsValues(t *testing.T) {
	s, clk := start(t, nil)
	byName := map[string]Instance{}
	for i, vm := range []string{"a", "b", "c", "d", "a"} {
		labels := map[string]string{"vm": vm, "team": []string{"x", "y"}[i%2]}
		if vm == "d" {
			delete(labels, "team")
		}
		byName[fmt.Sprintf("%s%d", vm, i)] = create(t, s, fmt.Sprintf("%s%d", vm, i), labels)
	}
	list := func(query string) []string {
		t.Helper()
		var names []string
		cursor := ""
		for pages := 0; ; pages++ {
			var page instanceList
			path := "/clouds/c1/v1/instances?limit=1&" + query
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			if resp := request(t, s, "GET", path, s.APIKey("c1"), nil, &page); resp.StatusCode != 200 || pages > 10 {
				t.Fatalf("%s: page %d: %d", query, pages, resp.StatusCode)
			}
			for _, in := range page.Instances {
				names = append(names, in.Name)
			}
			if cursor = page.NextCursor; cursor == "" {
				slices.Sort(names)
				return names
			}
		}
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"label_any=vm=a&label_any=vm=c&label_any=vm=nosuch", []string{"a0", "a4", "c2"}},
		{"label_any=vm=a&label_any=vm=a", []string{"a0", "a4"}},
		{"label_any=vm=a&label_any=vm=b&label=team=x", []string{"a0", "a4"}},
		{"label_any=vm=a&label_any=vm=b&label_any=team=y", []string{"b1"}},
		{"label_any=vm=d&label_any=vm=c&label=team=", []string{"d3"}}, // an empty value: the key is absent
		{"label_any=team=&label_any=team=y", []string{"b1", "d3"}},
		{"label=vm=c", []string{"c2"}},
		{"label_any=vm=nosuch", nil},
		{"", []string{"a0", "a4", "b1", "c2", "d3"}},
	} {
		if got := list(tc.query); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.query, got, tc.want)
		}
	}
	var eb errorBody
	if resp := request(t, s, "GET", "/clouds/c1/v1/instances?label_any=novalue", s.APIKey("c1"), nil, &eb); resp.StatusCode != 400 || eb.Error.Code != CodeInvalidRequest {
		t.Errorf("label_any without =: %d %+v", resp.StatusCode, eb)
	}

	// Purged instances leave the index.
	request(t, s, "DELETE", "/clouds/c1/v1/instances/"+byName["a0"].ID, s.APIKey("c1"), nil, nil)
	clk.Advance(time.Second + time.Hour) // deleted, then past retention
	if got := list("label_any=vm=a&include_terminated=true"); !slices.Equal(got, []string{"a4"}) {
		t.Fatalf("after a0's purge: %v", got)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clouds["c1"]
	n := 0
	for l, ids := range c.byLabel {
		for id := range ids {
			if in := c.instances[id]; in == nil || in.Labels[l.key] != l.value {
				t.Errorf("the index holds %s under %s=%s", id, l.key, l.value)
			}
			n++
		}
	}
	if n != 7 { // a4, b1, c2 with two labels each, d3 with one
		t.Errorf("the index holds %d entries, want 7", n)
	}
}
