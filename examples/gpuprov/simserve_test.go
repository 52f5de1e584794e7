package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSimServeJSON runs `gpuprov sim serve -o json` in-process, reads the
// one JSON object it prints, and uses what it says (endpoint, admin token,
// each cloud's key and URL) to reach the server; after Ctrl-C it exits 0
// with nothing more on stdout.
func TestSimServeJSON(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		defer pw.Close()
		code <- run(ctx, []string{"sim", "serve", "-o", "json", "--addr", "127.0.0.1:0", "--state", state}, pw, &stderr)
	}()

	type account struct{ Name, APIKey, URL string }
	var info struct {
		Endpoint   string `json:"endpoint"`
		AdminToken string `json:"admin_token"`
		State      string `json:"state"`
		Accounts   []struct {
			Name   string `json:"name"`
			APIKey string `json:"api_key"`
			URL    string `json:"url"`
		} `json:"accounts"`
	}
	dec := json.NewDecoder(pr)
	dec.DisallowUnknownFields()
	decoded := make(chan error, 1)
	go func() { decoded <- dec.Decode(&info) }()
	select {
	case err := <-decoded:
		if err != nil {
			t.Fatalf("sim serve -o json: first object: %v (stderr: %s)", err, stderr.String())
		}
	case c := <-code:
		t.Fatalf("sim serve exited %d before printing: %s", c, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatal("sim serve -o json printed nothing in 20s")
	}
	if !strings.HasPrefix(info.Endpoint, "http://127.0.0.1:") || info.AdminToken == "" || info.State != state {
		t.Fatalf("printed %+v: want the loopback endpoint, an admin token and state %s", info, state)
	}

	// The admin API answers with the token printed, and lists the same
	// accounts.
	var admin []struct {
		Name   string `json:"name"`
		APIKey string `json:"api_key"`
		URL    string `json:"url"`
	}
	if st := simGet(t, info.Endpoint+"/admin/clouds", info.AdminToken, &admin); st != http.StatusOK {
		t.Fatalf("GET /admin/clouds with the printed admin token: %d", st)
	}
	if len(info.Accounts) != 2 || len(admin) != 2 {
		t.Fatalf("accounts printed %+v, listed %+v: want sim-a and sim-b", info.Accounts, admin)
	}
	for i, a := range info.Accounts {
		if account(a) != account(admin[i]) {
			t.Fatalf("account %d printed %s at %s, the server says %s at %s", i, a.Name, a.URL, admin[i].Name, admin[i].URL)
		}
		// Each printed key opens its own cloud, and only that one.
		var offers struct {
			Offers []json.RawMessage `json:"offers"`
		}
		if st := simGet(t, a.URL+"/offers", a.APIKey, &offers); st != http.StatusOK || len(offers.Offers) == 0 {
			t.Fatalf("GET %s/offers with the printed key: %d, %d offers", a.URL, st, len(offers.Offers))
		}
		other := info.Accounts[1-i]
		if st := simGet(t, other.URL+"/offers", a.APIKey, nil); st != http.StatusUnauthorized {
			t.Fatalf("%s's key on %s: %d, want 401", a.Name, other.Name, st)
		}
	}

	cancel() // Ctrl-C
	rest, err := io.ReadAll(pr)
	if err != nil {
		t.Fatal(err)
	}
	if c := <-code; c != exitOK {
		t.Fatalf("exit %d after Ctrl-C: %s", c, stderr.String())
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("stdout after the JSON object: %q; want nothing", rest)
	}
	if !strings.Contains(stderr.String(), "state kept in "+state) {
		t.Fatalf("stderr %q: want the stopping line", stderr.String())
	}
}

// simGet GETs url with a bearer token, decodes a 200 answer into into (when
// not nil) and returns the status.
func simGet(t *testing.T, url, token string, into any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}
