package gpuprov_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// Every way a launch ends matches a sentinel a caller can branch on, and
// every error kind the events carry is one ErrorKinds documents.
func TestLaunchEndsMatchSentinelsAndDocumentedKinds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(e *env) []gpuprov.Option
		req    func(r *gpuprov.Request)
		cancel bool
		want   []error
		kind   string // the VM's LastErrorKind
	}{
		{name: "no offers under the cap", req: func(r *gpuprov.Request) { r.MaxPricePerHour = 0.5 },
			want: []error{gpuprov.ErrNoOffers}, kind: gpuprov.KindNoOffers},
		{name: "every offer fails", setup: func(e *env) []gpuprov.Option {
			for _, f := range e.fakes {
				f.Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Capacity, "sold out")})
			}
			return nil
		}, want: []error{gpuprov.ErrNoOffers, provider.Capacity}, kind: gpuprov.KindNoOffers},
		{name: "the bound on offers", setup: func(e *env) []gpuprov.Option {
			e.fake("a").Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Failed, "internal error")})
			return nil
		}, req: func(r *gpuprov.Request) { r.MaxOffers = 2 },
			want: []error{gpuprov.ErrOffersExhausted, provider.Failed}, kind: gpuprov.KindNoOffers},
		{name: "deadline", setup: func(e *env) []gpuprov.Option {
			for _, f := range e.fakes {
				f.BootTime = 2 * time.Hour
			}
			return nil
		}, req: func(r *gpuprov.Request) { r.Timeout = time.Minute },
			want: []error{context.DeadlineExceeded}, kind: gpuprov.KindDeadline},
		{name: "cancelled", cancel: true, want: []error{context.Canceled}, kind: gpuprov.KindCanceled},
		{name: "credentials", setup: func(e *env) []gpuprov.Option {
			e.fake("a").Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Credentials, "token revoked")})
			return nil
		}, want: []error{gpuprov.ErrAborted, provider.Credentials}, kind: "credentials"},
		{name: "bootstrap fails", setup: func(e *env) []gpuprov.Option {
			fn := newFakeNodes()
			fn.failBoot["vm"] = true
			return []gpuprov.Option{gpuprov.WithConnector(fn), gpuprov.WithBootstrapper(fn)}
		}, want: []error{gpuprov.ErrAborted}, kind: gpuprov.KindBootstrap},
		{name: "connect fails on every offer", setup: func(e *env) []gpuprov.Option {
			fn := newFakeNodes()
			fn.failConn["vm"] = 1000
			return []gpuprov.Option{gpuprov.WithConnector(fn), gpuprov.WithPhaseTimeouts(time.Minute, time.Minute)}
		}, req: func(r *gpuprov.Request) { r.MaxOffers = 2 },
			want: []error{gpuprov.ErrOffersExhausted}, kind: gpuprov.KindNoOffers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var opts []gpuprov.Option
			if tc.setup != nil {
				opts = tc.setup(e)
			}
			parked := &parkedConnector{in: make(chan struct{})}
			if tc.cancel {
				opts = append(opts, gpuprov.WithConnector(parked))
			}
			p := e.provisioner(e.j, opts...)
			req := h100("vm")
			if tc.req != nil {
				tc.req(&req)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				go func() { <-parked.in; cancel() }() // cancelled while it connects
			}
			_, err := p.Launch(ctx, req)
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("launch error %v does not match %v", err, w)
				}
			}
			row := e.assertClean("vm")
			if row.State != journal.StateFailed || row.LastErrorKind != tc.kind {
				t.Errorf("VM %s with kind %q, want failed with %q", row.State, row.LastErrorKind, tc.kind)
			}
			evs, err := e.j.Events(context.Background(), journal.EventQuery{})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if ev.ErrorKind != "" && !slices.Contains(gpuprov.ErrorKinds(), ev.ErrorKind) {
					t.Errorf("event %s carries kind %q, which ErrorKinds does not list", ev, ev.ErrorKind)
				}
			}
		})
	}
}
