package gpuprov_test

import (
	"context"
	"errors"
	"testing"

	"github.com/org/gpuprov"
	pt "github.com/org/gpuprov/provider/providertest"
)

// LaunchMany refuses two requests for one VM before launching anything.
func TestLaunchManyRefusesDuplicateNames(t *testing.T) {
	e := newEnv(t)
	res := e.p.LaunchMany(context.Background(), []gpuprov.Request{h100("w-1"), h100("w-2"), h100("w-1")})
	for i, r := range res {
		var re *gpuprov.RequestError
		if !errors.As(r.Err, &re) || !errors.Is(r.Err, gpuprov.ErrInvalidRequest) {
			t.Fatalf("result %d: %v, want the duplicate refused", i, r.Err)
		}
	}
	if n := len(e.fake("a").Calls(pt.OpCreate)) + len(e.fake("b").Calls(pt.OpCreate)); n != 0 {
		t.Fatalf("%d creates for a refused batch", n)
	}
}

// LaunchEach hands over each result as its launch ends: the slow VM's
// create waits until the fast VM has been delivered, which only a caller
// that gets results one by one can see.
func TestLaunchEachDeliversResultsAsTheyEnd(t *testing.T) {
	e := newEnv(t)
	fastDelivered := make(chan struct{})
	e.fake("b").Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool {
		if c.VM == "slow" {
			<-fastDelivered
		}
		return false
	}})
	slow := h100("slow")
	slow.Providers = []string{"b"}
	var order []string
	err := e.p.LaunchEach(context.Background(), []gpuprov.Request{slow, h100("fast")}, func(i int, r gpuprov.LaunchResult) {
		if r.Err != nil {
			t.Errorf("request %d: %v", i, r.Err)
			return
		}
		order = append(order, r.VM.Name)
		if r.VM.Name == "fast" {
			close(fastDelivered)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != "fast" || order[1] != "slow" {
		t.Fatalf("delivered %v, want fast then slow", order)
	}
}
