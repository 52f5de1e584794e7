package gpuprov

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	gossh "golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpu"
	"github.com/org/gpuprov/internal/backoff"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// Errors callers branch on.
var (
	// ErrNoOffers: no configured provider has an offer that satisfies the
	// request and is not blocked.
	ErrNoOffers = errors.New("gpuprov: no offers")
	// ErrOffersExhausted: every offer tried failed, or the bound on offers
	// tried was reached. Everything the attempts started was torn down.
	ErrOffersExhausted = errors.New("gpuprov: offers exhausted")
	// ErrAborted: a failure that no other offer can fix (invalid request,
	// credentials, a failing bootstrap) ended the launch; what it started was
	// torn down.
	ErrAborted = errors.New("gpuprov: launch aborted")
	// ErrTeardownIncomplete: an instance could not be confirmed gone. The VM
	// stays in state deleting with the error; Recover, Sweep and Delete retry.
	ErrTeardownIncomplete = errors.New("gpuprov: teardown incomplete")
	// ErrNotFound: no VM of that name in the journal.
	ErrNotFound = journal.ErrNotFound
	// ErrBusy: another live process drives the VM (it holds the lease).
	ErrBusy = journal.ErrLeased
	// ErrExists: a launch named a VM that exists and is not deleted or
	// failed.
	ErrExists = journal.ErrExists
	// ErrClosed: the Provisioner was closed. A VM it drove in the
	// background (RecoverInBackground) was left as the journal has it,
	// with nothing more sent to its cloud, for the next Recover.
	ErrClosed = errors.New("gpuprov: provisioner closed")
	// ErrKeyMismatch: the machine was launched with client keys this
	// Provisioner does not hold (a key generated anew at each start, say):
	// it could not log in. The error names both fingerprints. Persist the
	// key (ssh.LoadOrCreateKey) and give it to every process of the
	// service. A VM a Recover finds so is left as it is, for a process
	// with the key.
	ErrKeyMismatch = errors.New("gpuprov: client key mismatch")
	// ErrEnded: Wait's VM ended (failed or deleted) instead of becoming
	// ready; the error says how and why.
	ErrEnded = errors.New("gpuprov: VM ended")
)

// Provisioner gets VMs from the configured providers and journals every step.
// It is safe for concurrent use. Close it to stop its lease heartbeat.
type Provisioner struct {
	j         journal.Journal
	providers map[string]*paced
	clock     clock.Clock
	log       *slog.Logger
	sinks     []func(Event)
	owner     string
	leaseTTL  time.Duration
	maxOffers int
	blockTTL  map[provider.ErrorKind]time.Duration
	backoff   *backoff.Policy
	planTTL   time.Duration
	quotaTTL  time.Duration
	// capacityPoll is how often a VM waiting for capacity replans.
	capacityPoll time.Duration
	reapEvery    time.Duration // WithReaper; 0: no background reaper
	// watch is the interruption watch of the ready spot VMs, which the
	// reaper keeps (interrupt.go); noticeEvery how often it probes, and
	// onInterruption the caller's hook (WithInterruptionHandler).
	watch watcher
	// idle is the idle detection the reaper keeps (idle.go).
	idle           idleWatch
	noticeEvery    time.Duration
	onInterruption InterruptionHandler
	stopReap       context.CancelFunc
	reapDone       chan struct{}
	sshTO          time.Duration
	stepTO         time.Duration
	hostKeys       bool
	sshUser        string
	sshUserSet     bool // by WithSSH
	authKeys       []string
	sshKey         gossh.Signer // WithSSHKey

	connector    Connector
	accept       acceptance
	gpuBase      gpuBaselines
	hist         history
	bootstrapper Bootstrapper
	joiner       Joiner

	plans      planCache
	quotaCache quotaCache
	blockCache blockCache
	// retention is how long Prune keeps what the journal holds of ended
	// VMs (WithRetention; see prune.go).
	retention time.Duration
	// sharedGrace is how long a region's shared side resources outlive
	// this process's last VM there (WithSharedGrace; see shared.go).
	sharedGrace time.Duration
	// closing is closed by Close: pending shared-resource removals run
	// at once; lingering counts them.
	closing   chan struct{}
	lingering sync.WaitGroup
	// callObservers receive every primitive call (WithCallObserver).
	callObservers []func(Call)
	// tracerProvider is WithTracerProvider's (nil: the global one);
	// tracer is made from it by New (see tracing.go).
	tracerProvider trace.TracerProvider
	tracer         trace.Tracer

	mu   sync.Mutex
	held map[string]int // VM name → number of drivers holding its lease
	// leases is what the journal last confirmed of the leases held (see
	// lease.go); leaseMargin is the least time a lease must have left for
	// a fenced call to go out (WithLeaseMargin).
	leases      map[string]*lease
	leaseMargin time.Duration
	running     map[string]*running // in-process drivers, for Delete
	// background bounds the drivers RecoverInBackground leaves running:
	// Close cancels it (cause ErrClosed) and waits for bgDrivers.
	background context.Context
	stopBG     context.CancelCauseFunc
	bgDrivers  sync.WaitGroup
	closed     bool
	stopHB     chan struct{}
	hbDone     chan struct{}
	// stopShare ends the beats that share the accounts' rates with other
	// replicas (members.go); nil when the journal has no Members.
	stopShare chan struct{}
	shareDone chan struct{}
	pending   []error // option errors
}

// Option configures a Provisioner.
type Option func(*Provisioner)

// WithProvider adds already built providers (bypassing the registry).
func WithProvider(ps ...provider.CloudProvider) Option {
	return func(p *Provisioner) {
		for _, cp := range ps {
			if _, dup := p.providers[cp.Name()]; dup {
				p.pending = append(p.pending, fmt.Errorf("gpuprov: provider %q configured twice", cp.Name()))
				continue
			}
			p.providers[cp.Name()] = newPaced(cp)
		}
	}
}

// WithRegistryProvider builds the provider registered as id with s, filling
// in the journal's installation id. s.Name names this account (default id).
func WithRegistryProvider(id string, s provider.Settings) Option {
	return func(p *Provisioner) {
		s.Installation = p.j.Installation()
		if s.Logger == nil {
			s.Logger = p.log
		}
		cp, err := provider.Build(id, s)
		if err != nil {
			p.pending = append(p.pending, err)
			return
		}
		WithProvider(cp)(p)
	}
}

// WithClock sets the clock every wait uses (tests pass a fake).
func WithClock(c clock.Clock) Option { return func(p *Provisioner) { p.clock = c } }

// WithLogger sets the structured logger. Nothing secret is ever logged.
func WithLogger(l *slog.Logger) Option { return func(p *Provisioner) { p.log = l } }

// WithEvents adds a sink that receives every event after it is journaled.
// Sinks are called synchronously from the goroutine driving the VM and must
// not block.
func WithEvents(sink func(Event)) Option {
	return func(p *Provisioner) { p.sinks = append(p.sinks, sink) }
}

// WithOwner sets the lease owner id (default: host/pid/start-time/random).
func WithOwner(owner string) Option { return func(p *Provisioner) { p.owner = owner } }

// WithLeaseTTL sets how long a lease lasts without renewal (default 30s);
// the heartbeat renews it every third of that.
func WithLeaseTTL(d time.Duration) Option { return func(p *Provisioner) { p.leaseTTL = d } }

// WithLeaseMargin sets how long a VM's lease must still be valid, on this
// process's clock from the last renewal the journal confirmed, for a cloud
// call or a remote command of the VM to go out (default a third of the
// TTL). A lease with less left is renewed first; it must be shorter than
// the TTL. A process paused for longer than the margin between the check
// and the send may send after another process took the VM over: see
// docs/journal.md, "Fenced leases".
func WithLeaseMargin(d time.Duration) Option { return func(p *Provisioner) { p.leaseMargin = d } }

// WithMaxOffers bounds the offers tried per VM (default 8).
func WithMaxOffers(n int) Option { return func(p *Provisioner) { p.maxOffers = n } }

// WithBlockTTL sets how long an offer (or zone, region, provider) stays
// blocked after a failure of kind k.
func WithBlockTTL(k provider.ErrorKind, d time.Duration) Option {
	return func(p *Provisioner) { p.blockTTL[k] = d }
}

// WithBackoff sets the retry backoff for transient errors (default 500ms
// doubling to 30s, full jitter). seed fixes the jitter.
func WithBackoff(base, max time.Duration, seed uint64) Option {
	return func(p *Provisioner) { p.backoff = backoff.New(base, max, seed) }
}

// WithPlanCache sets how long plan results are shared between launches with
// the same resource request (default 20s; 0 turns sharing off).
func WithPlanCache(ttl time.Duration) Option { return func(p *Provisioner) { p.planTTL = ttl } }

// WithSSH sets the login user and the public keys (authorized_keys lines)
// installed on every VM, and whether gpuprov generates and injects a host key
// per VM on clouds that take user-data (default true), so that the connect
// phase pins it with no trust-on-first-use window.
func WithSSH(user string, authorizedKeys []string, injectHostKeys bool) Option {
	return func(p *Provisioner) {
		p.sshUser, p.sshUserSet, p.authKeys, p.hostKeys = user, true, authorizedKeys, injectHostKeys
	}
}

// WithSSHKey is the one SSH setting most callers need. signer is the client
// key: its public half is installed on every VM (beside any keys WithSSH
// lists), and the connect phase logs in with it through an SSHConnector
// that verifies each node's pinned host key (unless WithConnector sets a
// connector of another kind; an SSHConnector given there without a Signer
// gets this one). The login user is the provider's, "root" by default, or
// WithSSH's or the Request's.
func WithSSHKey(signer gossh.Signer) Option {
	return func(p *Provisioner) {
		if signer == nil {
			p.pending = append(p.pending, errors.New("gpuprov: WithSSHKey: nil signer"))
			return
		}
		p.sshKey = signer
	}
}

// WithConnector sets the connect phase (for example the ssh package's). With
// none, a launch is ready as soon as its instance runs with an SSH endpoint.
func WithConnector(c Connector) Option { return func(p *Provisioner) { p.connector = c } }

// WithAcceptance runs the GPU acceptance phase (after connect, before
// bootstrap; see docs/gpu-acceptance.md) with these thresholds on every
// launch, whatever the Connector. Without it, the phase runs with
// gpu's default thresholds when the Connector is an SSHConnector (as
// WithSSHKey makes), and not with a Connector of the caller's own making,
// whose Run may not be a shell. A request opts out with Acceptance.Skip.
func WithAcceptance(o gpu.Options) Option {
	return func(p *Provisioner) { p.accept.set, p.accept.on, p.accept.opts = true, true, o }
}

// WithoutAcceptance turns the GPU acceptance phase off for every launch: a
// machine is ready once connected and bootstrapped.
func WithoutAcceptance() Option {
	return func(p *Provisioner) { p.accept.set, p.accept.on = true, false }
}

// WithAcceptanceBlocks sets how long a machine that failed GPU acceptance is
// kept out of plans, across launches and processes (the journal's
// blocklist): host for an offer that names its machine (Offer.Host, a
// marketplace's machine id; default DefaultAcceptanceHostBlock), offer for
// the others, where the cloud picks the machine at create (the offer's
// type in its zone; default DefaultAcceptanceOfferBlock, short, since the
// next create there likely lands on another machine).
func WithAcceptanceBlocks(host, offer time.Duration) Option {
	return func(p *Provisioner) {
		if host <= 0 || offer <= 0 {
			p.pending = append(p.pending, fmt.Errorf("gpuprov: WithAcceptanceBlocks(%v, %v): both must be positive", host, offer))
			return
		}
		p.accept.hostBlock, p.accept.offerBlock = host, offer
	}
}

// WithBootstrapper sets the bootstrap phase; it needs a Connector.
func WithBootstrapper(b Bootstrapper) Option { return func(p *Provisioner) { p.bootstrapper = b } }

// WithJoiner sets how LaunchCluster forms a cluster; it needs a Connector.
func WithJoiner(jn Joiner) Option { return func(p *Provisioner) { p.joiner = jn } }

// WithPhaseTimeouts bounds the connect phase (default 5m) and each of the
// bootstrap and join phases (default 15m).
func WithPhaseTimeouts(connect, step time.Duration) Option {
	return func(p *Provisioner) { p.sshTO, p.stepTO = connect, step }
}

// New returns a Provisioner that journals to j and launches on the providers
// given by options. It fails if an option is invalid. A Provisioner without
// providers can still read the journal (List, Get, History); launching on it
// is an invalid request.
func New(j journal.Journal, opts ...Option) (*Provisioner, error) {
	if j == nil {
		return nil, errors.New("gpuprov: New with a nil journal")
	}
	bg, stopBG := context.WithCancelCause(context.Background())
	p := &Provisioner{
		background: bg, stopBG: stopBG,
		watch:       watcher{vms: map[string]*watch{}, done: map[string]bool{}, gone: map[string]int{}},
		idle:        idleWatch{vms: map[string]*idleVM{}},
		noticeEvery: provider.NoticeEvery,
		j:           j,
		providers:   map[string]*paced{},
		clock:       clock.Real,
		log:         slog.New(slog.DiscardHandler),
		leaseTTL:    30 * time.Second,
		retention:   DefaultRetention,
		sharedGrace: DefaultSharedGrace,
		closing:     make(chan struct{}),
		maxOffers:   8,
		blockTTL: map[provider.ErrorKind]time.Duration{
			provider.Capacity:    10 * time.Minute,
			provider.Failed:      10 * time.Minute,
			provider.Unavailable: 30 * time.Minute,
			provider.Quota:       time.Hour,
			provider.Credentials: 15 * time.Minute,
		},
		backoff:      backoff.New(500*time.Millisecond, 30*time.Second, uint64(time.Now().UnixNano())),
		planTTL:      20 * time.Second,
		quotaTTL:     DefaultQuotaTTL,
		capacityPoll: DefaultCapacityPoll,
		sshTO:        5 * time.Minute,
		stepTO:       15 * time.Minute,
		hostKeys:     true,
		sshUser:      "root",
		held:         map[string]int{},
		leases:       map[string]*lease{},
		accept:       acceptance{hostBlock: DefaultAcceptanceHostBlock, offerBlock: DefaultAcceptanceOfferBlock},
	}
	for _, o := range opts {
		o(p)
	}
	if p.owner == "" {
		p.owner = defaultOwner()
	}
	if p.leaseTTL <= 0 {
		return nil, fmt.Errorf("gpuprov: WithLeaseTTL(%v): the TTL must be positive", p.leaseTTL)
	}
	if p.leaseMargin == 0 {
		p.leaseMargin = p.leaseTTL / 3
	}
	if p.leaseMargin < 0 || p.leaseMargin >= p.leaseTTL {
		return nil, fmt.Errorf("gpuprov: WithLeaseMargin(%v): the margin must be positive and shorter than the lease TTL (%v)", p.leaseMargin, p.leaseTTL)
	}
	p.initTracer()
	for _, name := range p.Providers() {
		pp := p.providers[name]
		pp.start(p.clock, p.callObservers, p.tracer)
		// Every create is stamped with the journal's installation; a
		// provider that filters on another would never see it again.
		if err := pp.BindInstallation(j.Installation()); err != nil {
			p.pending = append(p.pending, fmt.Errorf("gpuprov: provider %q: %w: build it with the journal's installation (its WithInstallation(journal.Installation())) or through WithRegistryProvider", name, err))
		}
	}
	if err := errors.Join(p.pending...); err != nil {
		return nil, err
	}
	if err := p.reconcileSSH(); err != nil {
		return nil, err
	}
	if (p.bootstrapper != nil || p.joiner != nil) && p.connector == nil {
		return nil, errors.New("gpuprov: a bootstrapper or joiner needs a connector")
	}
	if !p.accept.set {
		_, p.accept.on = p.connector.(*SSHConnector)
	}
	if p.accept.on && p.connector == nil {
		return nil, errors.New("gpuprov: WithAcceptance needs a connector: the checks run over SSH")
	}
	if kj, ok := p.joiner.(*K3sJoiner); ok && kj.Connector == nil {
		kj.Connector = p.connector
	}
	p.stopHB, p.hbDone = make(chan struct{}), make(chan struct{})
	go p.heartbeat()
	if m, ok := j.(journal.Members); ok {
		if accounts := p.pacedAccounts(); len(accounts) > 0 {
			// The first share is known before the first call.
			p.beat(m, accounts)
			p.stopShare, p.shareDone = make(chan struct{}), make(chan struct{})
			go p.shareRates(m, accounts, p.stopShare, p.shareDone)
		}
	}
	if p.reapEvery > 0 {
		var rctx context.Context
		rctx, p.stopReap = context.WithCancel(context.Background())
		p.reapDone = make(chan struct{})
		go func() {
			defer close(p.reapDone)
			p.reaper(rctx)
		}()
	}
	return p, nil
}

// reconcileSSH derives the SSH settings from WithSSHKey and refuses settings
// that cannot log in: an SSHConnector whose key is not installed on the VMs
// would wait out the connect timeout on every offer.
func (p *Provisioner) reconcileSSH() error {
	if p.sshKey != nil {
		line := authorizedLine(p.sshKey.PublicKey())
		if !slices.ContainsFunc(p.authKeys, func(k string) bool { return sameKey(k, p.sshKey.PublicKey()) }) {
			p.authKeys = append(slices.Clip(p.authKeys), line)
		}
		switch c := p.connector.(type) {
		case nil:
			p.connector = &SSHConnector{Signer: p.sshKey}
		case *SSHConnector:
			if c.Signer == nil {
				c.Signer = p.sshKey
			}
		}
	}
	c, ok := p.connector.(*SSHConnector)
	if !ok {
		return nil // no connector, or one of the caller's own making
	}
	if c.User != "" && c.User != p.sshUser {
		// The keys go to the login the connector uses, unless WithSSH
		// named another: then every login would be refused.
		if p.sshUserSet {
			return fmt.Errorf("gpuprov: the SSHConnector logs in as %q, but WithSSH installs the keys for %q, so every login would be refused: name the login once, as SSHConnector.User with WithSSHKey, or as WithSSH's user", c.User, p.sshUser)
		}
		p.sshUser = c.User
	}
	if c.Signer == nil {
		return errors.New("gpuprov: the SSHConnector has no Signer: give the client key with WithSSHKey(signer), which installs it on every VM and connects with it")
	}
	if !slices.ContainsFunc(p.authKeys, func(k string) bool { return sameKey(k, c.Signer.PublicKey()) }) {
		return fmt.Errorf("gpuprov: the SSHConnector logs in with key %s, which is not installed on the VMs (WithSSH lists %d other keys), so every login would be refused: use WithSSHKey(signer), which installs the key and connects with it",
			gossh.FingerprintSHA256(c.Signer.PublicKey()), len(p.authKeys))
	}
	return nil
}

// authorizedLine is pub as an authorized_keys line.
func authorizedLine(pub gossh.PublicKey) string {
	return strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pub)))
}

// sameKey reports whether the authorized_keys line holds pub.
// clientKeys returns the SHA256 fingerprints of the keys this Provisioner
// installs on the machines it launches, sorted.
func (p *Provisioner) clientKeys() []string {
	var out []string
	for _, line := range p.authKeys {
		if k, _, _, _, err := gossh.ParseAuthorizedKey([]byte(line)); err == nil {
			out = append(out, gossh.FingerprintSHA256(k))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// loginKey returns the client key this Provisioner logs in with, if any.
func (p *Provisioner) loginKey() gossh.Signer {
	if p.sshKey != nil {
		return p.sshKey
	}
	if c, ok := p.connector.(*SSHConnector); ok {
		return c.Signer
	}
	return nil
}

// checkClientKey fails, with ErrKeyMismatch and both fingerprints, when VM
// name's machine was launched with keys (fingerprints) that do not include
// the one this Provisioner logs in with: a login would only time out.
func (p *Provisioner) checkClientKey(name string, keys []string) error {
	signer := p.loginKey()
	if signer == nil || len(keys) == 0 {
		return nil
	}
	if fp := gossh.FingerprintSHA256(signer.PublicKey()); !slices.Contains(keys, fp) {
		return errorf("VM %s was launched with key %s; this process holds %s: %w", name, strings.Join(keys, ", "), fp, ErrKeyMismatch)
	}
	return nil
}

func sameKey(line string, pub gossh.PublicKey) bool {
	k, _, _, _, err := gossh.ParseAuthorizedKey([]byte(line))
	return err == nil && bytes.Equal(k.Marshal(), pub.Marshal())
}

// Close stops the lease heartbeat and the reaper (WithReaper), letting a
// deletion the reaper has under way finish, and removes now the shared
// side resources that were waiting out their grace (WithSharedGrace).
// Launches still running lose their leases when those expire. It does not
// close the journal.
func (p *Provisioner) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	if p.stopReap != nil {
		// A deletion under way finishes its teardown first (bounded by
		// the provider's DeleteTimeout).
		p.stopReap()
		<-p.reapDone
	}
	// Drivers left running by RecoverInBackground stop where they are
	// (the journal holds the next step for the next Recover) before the
	// heartbeat that keeps their leases stops.
	p.stopBG(ErrClosed)
	p.bgDrivers.Wait()
	close(p.stopHB)
	<-p.hbDone
	if p.stopShare != nil {
		close(p.stopShare)
		<-p.shareDone
	}
	close(p.closing)
	p.lingering.Wait()
	return nil
}

// Owner returns the lease owner id of this Provisioner.
func (p *Provisioner) Owner() string { return p.owner }

// Providers returns the configured provider names, sorted.
func (p *Provisioner) Providers() []string { return slices.Sorted(maps.Keys(p.providers)) }

// Journal returns the journal the Provisioner writes to.
func (p *Provisioner) Journal() journal.Journal { return p.j }

var processStart = time.Now()

// defaultOwner names this process: host, pid, start time and a random
// suffix, so that Recover on the same host can tell a dead owner from a live
// one (see ownerAlive).
func defaultOwner() string {
	host, _ := os.Hostname() // an empty host still makes a unique owner with the random part
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return fmt.Sprintf("%s/%d/%d/%s", host, os.Getpid(), processStart.UnixNano(), hex.EncodeToString(b[:]))
}

func sortedKeys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }
