// Package providertest has what tests of gpuprov and of its adapters share:
// Fake, a scriptable in-memory cloud that implements the whole contract, and
// Run, the conformance kit every adapter's tests run against their mocks.
package providertest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider"
)

// Op names a primitive, for scripting and for the call log.
type Op string

const (
	OpPlan     Op = "plan"
	OpPrepare  Op = "prepare"
	OpCreate   Op = "create"
	OpObserve  Op = "observe"
	OpDelete   Op = "delete"
	OpCleanup  Op = "cleanup"
	OpList     Op = "list"
	OpDiagnose Op = "diagnose"
)

// Call is one call the fake received.
type Call struct {
	Op       Op
	VM       string
	Location provider.Location
	Offer    string            // offer key, for prepare and create
	IDs      []string          // for delete
	Token    string            // for create
	Labels   map[string]string // for prepare and create: spec.Labels()
	Sources  []string          // for prepare and create: spec.SourceRanges
	DiskGB   int               // for create: the offer's disk
	Err      error             // what the fake answered
	At       time.Time         // when, on the fake's clock
}

// Rule scripts the answer to calls: when Match accepts a call, Err is
// returned (Times times, or forever when Times is 0). For a create, Land
// makes the instance land even though Err is returned (a lost response).
type Rule struct {
	Op    Op
	Match func(c *Call) bool // nil matches every call of Op
	Err   error
	Times int
	Land  bool
	used  int
}

// Instance is an instance in the fake cloud.
type Instance struct {
	provider.Observed
	Installation string
	Offer        string
	Token        string
	Deleted      bool      // deletion requested
	GoneAt       time.Time // when a deletion completes
	FailBoot     bool
}

// Fake is an in-memory cloud. Instances boot after BootTime and vanish
// DeleteTime after deletion, on the fake's clock; a new instance is invisible
// to Observe for ListLag. It is safe for concurrent use.
type Fake struct {
	Clock        clock.Clock
	NameID       string
	Offers       []provider.Offer
	Caps         provider.Capabilities
	BootTime     time.Duration
	DeleteTime   time.Duration
	ListLag      time.Duration
	Idempotent   bool // honour InstanceSpec.IdempotencyToken
	Installation string
	// SSHPort is the port of every running instance's SSH endpoint on
	// 127.0.0.1 (default 22): point it at a test sshd to log in for real.
	SSHPort int

	mu        sync.Mutex
	rules     []*Rule
	calls     []Call
	instances map[string]*Instance
	byVM      map[string][]*Instance // Observe's index
	byToken   map[string]*Instance
	side      map[string]int // "vm|location" → prepares not cleaned up
	nextID    int
	failBoot  map[string]bool // offer key → instances fail while booting
}

// NewFake returns a fake named name with offers, on clock c, with zero boot
// and delete times, no listing lag, and capabilities suited to tests.
func NewFake(name string, c clock.Clock, offers ...provider.Offer) *Fake {
	for i := range offers {
		offers[i].Provider = name
	}
	return &Fake{
		Clock: c, NameID: name, Offers: offers,
		Caps: provider.Capabilities{
			BootTimeout: 10 * time.Minute, DeleteTimeout: 5 * time.Minute,
			PollInterval: time.Second, ConsistencyWindow: 0,
		},
		Idempotent: true,
		instances:  map[string]*Instance{}, byVM: map[string][]*Instance{}, byToken: map[string]*Instance{}, side: map[string]int{}, failBoot: map[string]bool{},
	}
}

// Offer is a helper that builds an offer for NewFake.
func Offer(region, zone, typ, gpu string, count int, price float64) provider.Offer {
	g, _ := provider.LookupGPU(gpu)
	return provider.Offer{Location: provider.Location{Region: region, Zone: zone}, InstanceType: typ,
		GPU: g.Name, GPUCount: count, GPUMemoryGB: g.MemoryGB, PricePerHour: price}
}

// BindInstallation implements provider.CloudProvider.
func (f *Fake) BindInstallation(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return provider.BindInstallation(&f.Installation, id)
}

// Script adds rules, checked in order before the fake does its normal work.
func (f *Fake) Script(rules ...*Rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, rules...)
}

// FailBoot makes instances of the offer with key fail while booting.
func (f *Fake) FailBoot(offerKey string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failBoot[offerKey] = true
}

// Calls returns the calls received so far, optionally only those of ops.
func (f *Fake) Calls(ops ...Op) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Call
	for _, c := range f.calls {
		if len(ops) == 0 || slices.Contains(ops, c.Op) {
			out = append(out, c)
		}
	}
	return out
}

// Live returns the instances not deleted (or whose deletion is not complete),
// sorted by id.
func (f *Fake) Live() []Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.Clock.Now()
	var out []Instance
	for _, in := range f.instances {
		if !in.Deleted || now.Before(in.GoneAt) {
			out = append(out, *in)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// All returns every instance ever created, sorted by id.
func (f *Fake) All() []Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Instance
	for _, in := range f.instances {
		out = append(out, *in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// SideResources returns the (vm|location) keys with side resources not
// cleaned up.
func (f *Fake) SideResources() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k, n := range f.side {
		if n > 0 {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// Preempt terminates a running instance as the cloud would.
func (f *Fake) Preempt(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if in, ok := f.instances[id]; ok {
		in.Deleted, in.GoneAt = true, f.Clock.Now()
		in.VendorStatus = "preempted"
	}
}

// script records c and returns the scripted answer, if a rule matches.
func (f *Fake) script(c Call) (land, matched bool, err error) {
	for _, r := range f.rules {
		if r.Op != c.Op || (r.Match != nil && !r.Match(&c)) || (r.Times > 0 && r.used >= r.Times) {
			continue
		}
		r.used++
		return r.Land, true, r.Err
	}
	return false, false, nil
}

func (f *Fake) log(c Call) {
	if f.Clock != nil {
		c.At = f.Clock.Now()
	}
	f.calls = append(f.calls, c)
}

// Name implements provider.CloudProvider.
func (f *Fake) Name() string { return f.NameID }

// Capabilities implements provider.CloudProvider: Caps, with
// FeatureIdempotencyToken unsupported when the Fake does not honour tokens
// (Idempotent false).
func (f *Fake) Capabilities() provider.Capabilities {
	c := f.Caps
	if !f.Idempotent && c.Supports(provider.FeatureIdempotencyToken) {
		c.Unsupported = append(slices.Clip(c.Unsupported), provider.FeatureIdempotencyToken)
	}
	return c
}

// SetOffers replaces the offers the fake plans, safely while it serves
// calls (a restock, a price that drops, a new listing).
func (f *Fake) SetOffers(offers ...provider.Offer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Offers = offers
}

// Plan implements provider.CloudProvider.
func (f *Fake) Plan(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := Call{Op: OpPlan}
	if _, ok, err := f.script(c); ok && err != nil {
		c.Err = err
		f.log(c)
		return nil, err
	}
	f.log(c)
	var out []provider.Offer
	for _, o := range f.Offers {
		if req.Accepts(&o) {
			o.Detail = json.RawMessage(fmt.Sprintf(`{"offer":%q}`, o.Key()))
			out = append(out, o)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PricePerHour < out[j].PricePerHour })
	return out, nil
}

func sideKey(vm string, loc provider.Location) string { return vm + "|" + loc.String() }

// Prepare implements provider.CloudProvider.
func (f *Fake) Prepare(ctx context.Context, o *provider.Offer, spec *provider.InstanceSpec) (json.RawMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := Call{Op: OpPrepare, VM: spec.VM, Location: o.Location, Offer: o.Key(), Labels: spec.Labels(), Sources: spec.SourceRanges}
	if _, ok, err := f.script(c); ok && err != nil {
		c.Err = err
		f.log(c)
		return nil, err
	}
	f.log(c)
	f.side[sideKey(spec.VM, o.Location)] = 1 // idempotent: one set of side resources
	return json.RawMessage(fmt.Sprintf(`{"firewall":"gpuprov-%s"}`, spec.VM)), nil
}

// Create implements provider.CloudProvider.
func (f *Fake) Create(ctx context.Context, o *provider.Offer, prepared json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := Call{Op: OpCreate, VM: spec.VM, Location: o.Location, Offer: o.Key(), Token: spec.IdempotencyToken,
		Labels: spec.Labels(), Sources: spec.SourceRanges, DiskGB: o.DiskGB}
	land, matched, serr := f.script(c)
	if matched && serr != nil && !land {
		c.Err = serr
		f.log(c)
		return "", serr
	}
	if spec.Installation == "" || spec.VM == "" {
		c.Err = provider.Errorf(provider.InvalidRequest, f.NameID, "create", "spec without identity")
		f.log(c)
		return "", c.Err
	}
	if in, ok := f.byToken[spec.IdempotencyToken]; ok && f.Idempotent && spec.IdempotencyToken != "" {
		c.IDs = []string{in.ID}
		c.Err = serr
		f.log(c)
		if serr != nil {
			return "", serr
		}
		return in.ID, nil
	}
	f.nextID++
	id := fmt.Sprintf("%s-i-%04d", f.NameID, f.nextID)
	now := f.Clock.Now()
	in := &Instance{
		Observed: provider.Observed{ID: id, VM: spec.VM, Status: provider.StatusPending, Location: o.Location,
			InstanceType: o.InstanceType, Created: now, VendorStatus: "booting"},
		Installation: spec.Installation, Offer: o.Key(), Token: spec.IdempotencyToken, FailBoot: f.failBoot[o.Key()],
	}
	f.instances[id] = in
	f.byVM[spec.VM] = append(f.byVM[spec.VM], in)
	if spec.IdempotencyToken != "" {
		f.byToken[spec.IdempotencyToken] = in
	}
	c.IDs, c.Err = []string{id}, serr
	f.log(c)
	if serr != nil {
		return "", serr
	}
	return id, nil
}

// view returns what Observe shows of in at now, and whether it shows it.
func (f *Fake) view(in *Instance, now time.Time) (provider.Observed, bool) {
	if now.Before(in.Created.Add(f.ListLag)) {
		return provider.Observed{}, false
	}
	o := in.Observed
	switch {
	case in.Deleted && !now.Before(in.GoneAt):
		return o, false
	case in.Deleted:
		o.Status, o.VendorStatus = provider.StatusStopping, "stopping"
	case now.Before(in.Created.Add(f.BootTime)):
		o.Status, o.VendorStatus = provider.StatusPending, "booting"
	case in.FailBoot:
		o.Status, o.VendorStatus = provider.StatusFailed, "boot-failed"
	default:
		o.Status, o.VendorStatus = provider.StatusRunning, "running"
		o.SSH = &provider.SSHEndpoint{Host: "127.0.0.1", Port: cmp.Or(f.SSHPort, 22), User: "root"}
		o.PublicIP = "127.0.0.1"
	}
	return o, true
}

// Observe implements provider.CloudProvider.
func (f *Fake) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := Call{Op: OpObserve, VM: vm, Location: loc}
	if _, ok, err := f.script(c); ok && err != nil {
		c.Err = err
		f.log(c)
		return nil, err
	}
	f.log(c)
	return f.list(f.byVM[vm], func(in *Instance) bool { return in.Location == loc }), nil
}

func (f *Fake) list(from []*Instance, match func(*Instance) bool) []provider.Observed {
	now := f.Clock.Now()
	out := []provider.Observed{}
	for _, in := range from {
		if in.Installation != f.Installation && f.Installation != "" {
			continue
		}
		if !match(in) {
			continue
		}
		if o, ok := f.view(in, now); ok {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Delete implements provider.CloudProvider.
func (f *Fake) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := Call{Op: OpDelete, VM: vm, Location: loc, IDs: ids}
	if _, ok, err := f.script(c); ok && err != nil {
		c.Err = err
		f.log(c)
		return err
	}
	f.log(c)
	now := f.Clock.Now()
	for _, id := range ids {
		if in, ok := f.instances[id]; ok && !in.Deleted {
			in.Deleted, in.GoneAt = true, now.Add(f.DeleteTime)
		}
	}
	return nil
}

// Cleanup implements provider.CloudProvider.
func (f *Fake) Cleanup(ctx context.Context, loc provider.Location, vm string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := Call{Op: OpCleanup, VM: vm, Location: loc}
	if _, ok, err := f.script(c); ok && err != nil {
		c.Err = err
		f.log(c)
		return err
	}
	f.log(c)
	delete(f.side, sideKey(vm, loc))
	return nil
}

// List implements provider.Lister.
func (f *Fake) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := Call{Op: OpList, Location: loc}
	if _, ok, err := f.script(c); ok && err != nil {
		c.Err = err
		f.log(c)
		return nil, err
	}
	f.log(c)
	all := make([]*Instance, 0, len(f.instances))
	for _, in := range f.instances {
		all = append(all, in)
	}
	return f.list(all, func(in *Instance) bool { return loc.IsZero() || in.Location == loc }), nil
}

// Break makes an existing instance fail, as a host error would.
func (f *Fake) Break(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if in, ok := f.instances[id]; ok {
		in.FailBoot = true
		in.Created = in.Created.Add(-f.BootTime) // past boot: its failure shows now
	}
}
