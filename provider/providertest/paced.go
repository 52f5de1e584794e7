package providertest

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/org/gpuprov/provider"
)

// Paced is a Fake that paces its own requests (provider.RequestPacer):
// every primitive it runs is one request, sent after the core's pacer gave
// it a turn, and given up when the pacer refuses. With QuietPrepare, a
// Prepare sends no request and makes nothing, as an adapter does whose
// side resources are all shared and already made (the sim's remembered
// firewall, with no SSH key to install).
//
// Sent counts the requests sent, by op: a test that kills the journal
// checks that none went out after it died.
type Paced struct {
	*Fake
	QuietPrepare bool

	mu   sync.Mutex
	turn func(context.Context) error
	sent map[Op]int
}

// NewPaced wraps f.
func NewPaced(f *Fake) *Paced { return &Paced{Fake: f, sent: map[Op]int{}} }

// UsePacer implements provider.RequestPacer.
func (p *Paced) UsePacer(wait func(context.Context) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.turn = wait
}

// send waits for the turn of one request of op and counts it sent.
func (p *Paced) send(ctx context.Context, op Op) error {
	p.mu.Lock()
	turn := p.turn
	p.mu.Unlock()
	if turn != nil {
		if err := turn(ctx); err != nil {
			return &provider.Error{Kind: provider.Transient, Provider: p.Name(), Op: string(op), Err: err}
		}
	}
	p.mu.Lock()
	p.sent[op]++
	p.mu.Unlock()
	return nil
}

// Sent returns the number of requests sent, in all.
func (p *Paced) Sent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.sent {
		n += c
	}
	return n
}

// SentOf returns the number of requests of op sent.
func (p *Paced) SentOf(op Op) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent[op]
}

// Plan is the Fake's, as one request.
func (p *Paced) Plan(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	if err := p.send(ctx, OpPlan); err != nil {
		return nil, err
	}
	return p.Fake.Plan(ctx, req)
}

// Prepare is the Fake's, as one request (none with QuietPrepare).
func (p *Paced) Prepare(ctx context.Context, o *provider.Offer, spec *provider.InstanceSpec) (json.RawMessage, error) {
	if p.QuietPrepare {
		return json.RawMessage(`{}`), nil
	}
	if err := p.send(ctx, OpPrepare); err != nil {
		return nil, err
	}
	return p.Fake.Prepare(ctx, o, spec)
}

// Create is the Fake's, as one request.
func (p *Paced) Create(ctx context.Context, o *provider.Offer, prepared json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	if err := p.send(ctx, OpCreate); err != nil {
		return "", err
	}
	return p.Fake.Create(ctx, o, prepared, spec)
}

// Observe is the Fake's, as one request.
func (p *Paced) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	if err := p.send(ctx, OpObserve); err != nil {
		return nil, err
	}
	return p.Fake.Observe(ctx, loc, vm)
}

// Delete is the Fake's, as one request.
func (p *Paced) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	if err := p.send(ctx, OpDelete); err != nil {
		return err
	}
	return p.Fake.Delete(ctx, loc, vm, ids)
}

// Cleanup is the Fake's, as one request.
func (p *Paced) Cleanup(ctx context.Context, loc provider.Location, vm string) error {
	if err := p.send(ctx, OpCleanup); err != nil {
		return err
	}
	return p.Fake.Cleanup(ctx, loc, vm)
}

// List is the Fake's, as one request.
func (p *Paced) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	if err := p.send(ctx, OpList); err != nil {
		return nil, err
	}
	return p.Fake.List(ctx, loc)
}
