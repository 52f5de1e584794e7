package gpuprov

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// prioSpy records, for each create, whether the core sent it as a
// priority turn.
type prioSpy struct {
	*pt.Fake
	mu   sync.Mutex
	prio []bool
}

func (s *prioSpy) Create(ctx context.Context, o *provider.Offer, prepared json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	p, _ := ctx.Value(prioKey{}).(bool)
	s.mu.Lock()
	s.prio = append(s.prio, p)
	s.mu.Unlock()
	return s.Fake.Create(ctx, o, prepared, spec)
}

// A create sent again after a 5xx asks for a priority turn, with and
// without idempotency tokens, so that it goes ahead of the first sends
// queued on the account (TestPacerListingsGoFirst shows the pacer grants
// priority turns first); the first send waits in line.
func TestResendKeepsItsPlace(t *testing.T) {
	for _, tokens := range []bool{true, false} {
		clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		stop := clk.AutoAdvance()
		db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
		if err != nil {
			t.Fatal(err)
		}
		f := pt.NewFake("a", clk, pt.Offer("us-east", "us-east-1a", "h100.1", "H100-80GB", 1, 2.00))
		f.Idempotent, f.Installation = tokens, db.Installation()
		f.Script(&pt.Rule{Op: pt.OpCreate, Err: provider.Errorf(provider.Transient, "a", "create", "HTTP 503"), Times: 1})
		spy := &prioSpy{Fake: f}
		p, err := New(db, WithClock(clk), WithProvider(spy), WithBackoff(100*time.Millisecond, time.Second, 1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Launch(context.Background(), Request{Name: "train", GPU: "H100", Timeout: time.Hour}); err != nil {
			t.Fatalf("tokens %v: Launch: %v", tokens, err)
		}
		p.Close()
		stop()
		db.Close()
		if want := []bool{false, true}; len(spy.prio) != 2 || spy.prio[0] != want[0] || spy.prio[1] != want[1] {
			t.Errorf("tokens %v: creates sent as priority turns %v, want %v (the first in line, the resend ahead)", tokens, spy.prio, want)
		}
	}
}
