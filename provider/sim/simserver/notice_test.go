package simserver

import (
	"net/http"
	"testing"
	"time"
)

// TestPreemptionNoticeOnTheMetadataEndpoint: a preemption announced 30 s
// ahead (the admin API's notice) shows on the instance's metadata endpoint
// at once, with its time, as AWS's spot/instance-action answers; the
// instance runs until then and is preempted at that time; before the
// notice and after the preemption the endpoint answers 404.
func TestPreemptionNoticeOnTheMetadataEndpoint(t *testing.T) {
	s, clk := start(t, nil)
	in := create(t, s, "vm", nil)
	clk.Advance(3 * time.Second) // running
	path := "/metadata/c1/" + in.ID + "/interruption"
	if resp := request(t, s, "GET", path, "", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("before any notice: %d, want 404", resp.StatusCode)
	}
	var got Instance
	if resp := request(t, s, "POST", "/admin/clouds/c1/instances/"+in.ID+"/preempt?notice=30s", s.AdminToken(), nil, &got); resp.StatusCode != 200 ||
		got.Status != StatusRunning {
		t.Fatalf("preempt with a notice: %d %+v, want 200 and still running", resp.StatusCode, got)
	}
	want := clk.Now().Add(30 * time.Second)
	var n Notice
	if resp := request(t, s, "GET", path, "", nil, &n); resp.StatusCode != 200 || n.Action != "terminate" || !n.Time.Equal(want) {
		t.Fatalf("notice: %d %+v, want terminate at %v", resp.StatusCode, n, want)
	}
	clk.Advance(29 * time.Second)
	if got, _ := s.Instance("c1", in.ID); got.Status != StatusRunning {
		t.Fatalf("29 s into a 30 s notice the instance is %s", got.Status)
	}
	clk.Advance(time.Second)
	if got, _ := s.Instance("c1", in.ID); got.Status != StatusPreempted {
		t.Fatalf("at the notice's time the instance is %s, want preempted", got.Status)
	}
	if resp := request(t, s, "GET", path, "", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("after the preemption: %d, want 404", resp.StatusCode)
	}
	if resp := request(t, s, "POST", "/admin/clouds/c1/instances/"+in.ID+"/preempt?notice=soon", s.AdminToken(), nil, nil); resp.StatusCode != 400 {
		t.Fatalf("a notice that is no duration: %d, want 400", resp.StatusCode)
	}
}

// TestPreemptNoticeFault: with PreemptNotice, a preemption drawn by
// PreemptionRate is announced that long ahead.
func TestPreemptNoticeFault(t *testing.T) {
	s, clk := start(t, func(o *Options) {
		o.Clouds[0].Faults = Faults{PreemptionRate: 1, PreemptWithin: Duration(time.Minute), PreemptNotice: Duration(20 * time.Second)}
	})
	in := create(t, s, "vm", nil)
	clk.Advance(3 * time.Second)
	path := "/metadata/c1/" + in.ID + "/interruption"
	var n Notice
	for request(t, s, "GET", path, "", nil, &n).StatusCode != 200 {
		if got, _ := s.Instance("c1", in.ID); got.Status != StatusRunning {
			t.Fatalf("preempted (%s) without a notice first", got.Status)
		}
		clk.Advance(time.Second)
	}
	if left := n.Time.Sub(clk.Now()); left <= 0 || left > 20*time.Second {
		t.Fatalf("notice with %v left, want at most 20 s", left)
	}
	clk.Advance(n.Time.Sub(clk.Now()))
	if got, _ := s.Instance("c1", in.ID); got.Status != StatusPreempted {
		t.Fatalf("at the announced time the instance is %s", got.Status)
	}
}
