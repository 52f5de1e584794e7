package simserver

import (
	"fmt"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestNewServerServesAndClosesAtCleanup: NewServer serves the default
// clouds with the options given (instant timing, a stockout on sim-a only)
// and is closed when the test that started it ends.
func TestNewServerServesAndClosesAtCleanup(t *testing.T) {
	var url string
	t.Run("serve", func(t *testing.T) {
		s := NewServer(t, WithTiming(Timing{}), WithoutSSH(),
			WithFaults("sim-a", Faults{StockoutOffers: []string{"*"}}))
		url = s.URL()
		if got := s.Clouds(); !reflect.DeepEqual(got, []string{"sim-a", "sim-b"}) {
			t.Fatalf("clouds %v, want sim-a and sim-b", got)
		}
		var e errorBody
		resp := request(t, s, "POST", "/clouds/sim-a/v1/instances", s.APIKey("sim-a"),
			map[string]any{"offer_id": "a-t4x1-euw1b", "name": "x"}, &e)
		if resp.StatusCode != http.StatusConflict || e.Error.Code != CodeOutOfCapacity {
			t.Fatalf("create on sim-a: %d %+v, want 409 out_of_capacity", resp.StatusCode, e)
		}
		var in Instance
		resp = request(t, s, "POST", "/clouds/sim-b/v1/instances", s.APIKey("sim-b"),
			map[string]any{"offer_id": "b-t4-1", "name": "x"}, &in)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create on sim-b: %d, want 201", resp.StatusCode)
		}
		// Timing{} boots at once: the admin view shows it running already.
		got, err := s.Instance("sim-b", in.ID)
		if err != nil || got.Status != StatusRunning {
			t.Fatalf("instance %s: %+v, %v; want running at once", in.ID, got.Status, err)
		}
	})
	if url == "" {
		t.FailNow()
	}
	if resp, err := http.Get(url + "/clouds/sim-a/v1/offers"); err == nil {
		resp.Body.Close()
		t.Fatalf("server still answers after its test ended: %s", resp.Status)
	}
}

// TestNewServerFailsTheTest: an option or a start that fails ends the test
// with a message naming the cause, and NewServer never returns.
func TestNewServerFailsTheTest(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"unknown cloud", []Option{WithFaults("sim-c", Faults{})}, `unknown cloud "sim-c"`},
		{"bad fault", []Option{WithFaults("*", Faults{ErrorRate: 2})}, "error_rate = 2 is not a probability"},
		{"not loopback", []Option{WithOptions(Options{Addr: "192.0.2.1:0"})}, "not a loopback address"},
		{"faults before WithOptions's clouds", []Option{WithOptions(Options{}), WithFaults("sim-a", Faults{})}, `unknown cloud "sim-a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := &recordTB{TB: t}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := NewServer(tb, tc.opts...)
				tb.returned = s != nil
			}()
			wg.Wait()
			tb.runCleanups()
			if tb.returned || !strings.Contains(tb.fatal, tc.want) {
				t.Fatalf("returned %v, fatal %q; want no return and a fatal naming %q", tb.returned, tb.fatal, tc.want)
			}
		})
	}
}

// TestAccounts: Accounts and GET /admin/clouds list every cloud with its
// key and API base, the ones a client needs.
func TestAccounts(t *testing.T) {
	s := NewServer(t, WithoutSSH())
	want := []Account{
		{Name: "sim-a", APIKey: s.APIKey("sim-a"), URL: s.URL() + "/clouds/sim-a/v1"},
		{Name: "sim-b", APIKey: s.APIKey("sim-b"), URL: s.URL() + "/clouds/sim-b/v1"},
	}
	if want[0].APIKey == "" || want[0].APIKey == want[1].APIKey {
		t.Fatalf("keys %q and %q: want two distinct keys", want[0].APIKey, want[1].APIKey)
	}
	if got := s.Accounts(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Accounts() = %+v, want %+v", got, want)
	}
	var got []Account
	if resp := request(t, s, "GET", "/admin/clouds", s.AdminToken(), nil, &got); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /admin/clouds: %d", resp.StatusCode)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GET /admin/clouds = %+v, want %+v", got, want)
	}
}

// recordTB records a Fatalf (and ends its goroutine, as testing.T does)
// and keeps the cleanups to run them after.
type recordTB struct {
	testing.TB
	mu       sync.Mutex
	fatal    string
	returned bool
	cleanups []func()
}

func (r *recordTB) Helper() {}

func (r *recordTB) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recordTB) Cleanup(f func()) {
	r.mu.Lock()
	r.cleanups = append(r.cleanups, f)
	r.mu.Unlock()
}

func (r *recordTB) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}
