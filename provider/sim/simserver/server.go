package simserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/internal/sshd"
)

// Errors of the Go API.
var (
	// ErrUnknownCloud is returned for a cloud name the server does not serve.
	ErrUnknownCloud = errors.New("simserver: unknown cloud")
	// ErrNotFound is returned for an instance the cloud does not hold.
	ErrNotFound = errors.New("simserver: no such instance")
	// ErrNotRunning is returned by Preempt for an instance that is not running.
	ErrNotRunning = errors.New("simserver: instance is not running")
)

// Server is a running simulated cloud server. Its methods are safe for
// concurrent use.
type Server struct {
	opts       Options
	clock      clock.Clock
	log        *slog.Logger
	url        string
	adminToken string
	stateDir   string
	tempDir    bool // stateDir is ours to remove at Close

	ln   net.Listener
	http *http.Server

	mu      sync.Mutex
	closed  bool
	dirty   bool // mutated since the last save (SaveInterval only)
	clouds  map[string]*cloud
	closing []*sshd.Server // SSH servers to close once mu is released

	done chan struct{}  // closed by Close: ends holds, sleeps and timers
	wg   sync.WaitGroup // timer goroutines and the HTTP server
}

// cloud is one account's state; every field is guarded by Server.mu.
type cloud struct {
	cfg       CloudConfig
	apiKey    string
	offers    map[string]*Offer
	faults    Faults
	limiter   *rate.Limiter
	rnd       *mrand.Rand
	instances map[string]*instance
	tokens    map[string]string             // idempotency token → instance id
	byLabel   map[label]map[string]struct{} // label → ids of the instances carrying it (index.go)
	firewalls map[string]*Firewall
	groups    map[string]*PlacementGroup // by firewallKey(region, name)
	sshKeys   map[string]*SSHKey
	counter   int
	// volumes are the cloud's volumes (volume.go), volumeTokens their
	// idempotency tokens, volumeCounter the last volume id's number.
	volumes       map[string]*volume
	volumeTokens  map[string]string
	volumeCounter int
	stats         Stats
	// bought are the blocks bought (reservations beside the configured
	// ones), sold the block offerings they were; started is when the
	// server started (block offerings' windows count from it).
	bought  []Reservation
	sold    map[string]bool
	started time.Time
}

// Start starts a server with opts: it loads opts.StateFile if it exists,
// restarts the SSH endpoints of the instances that were running, and
// listens on opts.Addr (127.0.0.1:0 by default). A non-loopback address is
// refused.
func Start(opts Options) (*Server, error) {
	opts, err := opts.validate()
	if err != nil {
		return nil, err
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if err := checkLoopback(addr); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, clock: opts.Clock, log: opts.Logger, clouds: map[string]*cloud{}, done: make(chan struct{})}
	for _, cc := range opts.Clouds {
		if err := cc.Faults.validate(); err != nil {
			return nil, fmt.Errorf("%w (cloud %s)", err, cc.Name)
		}
		h := fnv.New64a()
		h.Write([]byte(cc.Name))
		c := &cloud{cfg: cc, apiKey: cc.APIKey, offers: map[string]*Offer{}, faults: cc.Faults,
			limiter: cc.Faults.newLimiter(), rnd: mrand.New(mrand.NewPCG(opts.Seed, h.Sum64())),
			instances: map[string]*instance{}, tokens: map[string]string{}, byLabel: map[label]map[string]struct{}{},
			firewalls: map[string]*Firewall{}, sshKeys: map[string]*SSHKey{}, groups: map[string]*PlacementGroup{},
			volumes: map[string]*volume{}, volumeTokens: map[string]string{},
			stats: Stats{Calls: map[string]int{}, Errors: map[string]int{}}, sold: map[string]bool{}, started: opts.Clock.Now()}
		for i := range cc.Offers {
			c.offers[cc.Offers[i].ID] = &cc.Offers[i]
		}
		s.clouds[cc.Name] = c
	}
	s.stateDir = opts.StateDir
	switch {
	case s.stateDir != "":
	case opts.StateFile != "":
		s.stateDir = opts.StateFile + ".d"
	default:
		if s.stateDir, err = os.MkdirTemp("", "simserver-"); err != nil {
			return nil, fmt.Errorf("simserver: %w", err)
		}
		s.tempDir = true
	}
	if err := os.MkdirAll(s.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("simserver: %w", err)
	}
	s.adminToken = opts.AdminToken
	if err := s.load(); err != nil {
		s.cleanupDir()
		return nil, err
	}
	if s.adminToken == "" {
		s.adminToken = "simadmin-" + randomHex(16)
	}
	for _, c := range s.clouds {
		if c.apiKey == "" {
			c.apiKey = "simkey-" + randomHex(16)
		}
	}
	s.ln, err = net.Listen("tcp", addr)
	if err != nil {
		s.cleanupDir()
		return nil, fmt.Errorf("simserver: %w", err)
	}
	s.url = "http://" + s.ln.Addr().String()
	s.http = &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}

	s.mu.Lock()
	now := s.clock.Now()
	for _, c := range s.clouds {
		for _, in := range c.instances {
			s.resume(c, in, now)
		}
	}
	err = s.saveLocked()
	s.unlock()
	if err != nil {
		_ = s.Close() // the save error is the one to report
		return nil, err
	}
	if opts.SaveInterval > 0 && opts.StateFile != "" {
		s.wg.Add(1)
		go s.saveLoop()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("simserver: serve", "err", err)
		}
	}()
	s.log.Info("simserver: listening", "url", s.url, "clouds", s.Clouds())
	return s, nil
}

// checkLoopback refuses an address that is not on a loopback interface.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("simserver: address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("simserver: address %q is not a loopback address; the simulator binds loopback only", addr)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics instead)
	return hex.EncodeToString(b)
}

// URL returns the server's base URL, http://127.0.0.1:port.
func (s *Server) URL() string { return s.url }

// AdminToken returns the bearer token of the /admin API.
func (s *Server) AdminToken() string { return s.adminToken }

// APIKey returns the bearer token of cloud, or "" for an unknown cloud.
func (s *Server) APIKey(cloud string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clouds[cloud]; c != nil {
		return c.apiKey
	}
	return ""
}

// Account is one cloud the server serves, with what a client needs to use
// it: provider/sim's Config takes Endpoint (or the server's URL with Cloud
// set to Name) and APIKey.
type Account struct {
	// Name is the cloud's name, its path segment under /clouds/.
	Name string `json:"name"`
	// APIKey is the cloud's bearer token, a secret.
	APIKey string `json:"api_key"`
	// URL is the cloud's API base, URL()/clouds/{Name}/v1.
	URL string `json:"url"`
}

// Accounts returns every cloud served with its API key and API base,
// sorted by name.
func (s *Server) Accounts() []Account {
	out := []Account{}
	for _, n := range s.Clouds() {
		out = append(out, Account{Name: n, APIKey: s.APIKey(n), URL: s.url + "/clouds/" + n + "/v1"})
	}
	return out
}

// Clouds returns the names of the clouds served, sorted.
func (s *Server) Clouds() []string {
	names := make([]string, 0, len(s.clouds))
	for n := range s.clouds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Close stops the HTTP server, every SSH server and every goroutine the
// server started; a request held by a timeout fault is answered. With a
// StateFile, the state stays on disk for the next Start.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, c := range s.clouds {
		for _, in := range c.instances {
			s.stopSSH(in)
		}
	}
	s.unlock()
	close(s.done)
	var err error
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = s.http.Shutdown(ctx)
		cancel()
		if err != nil {
			err = s.http.Close()
		}
	}
	s.wg.Wait()
	s.mu.Lock()
	if s.dirty {
		if serr := s.saveLocked(); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	s.unlock()
	s.cleanupDir()
	return err
}

func (s *Server) cleanupDir() {
	if s.tempDir {
		_ = os.RemoveAll(s.stateDir) // a leftover temp folder is harmless
	}
}

// unlock releases s.mu, then closes the SSH servers queued while it was
// held (closing waits for their goroutines, which must not hold the lock).
func (s *Server) unlock() {
	closing := s.closing
	s.closing = nil
	s.mu.Unlock()
	for _, srv := range closing {
		_ = srv.Close() // the instance is going away; a close error changes nothing
	}
}

// after runs f (holding s.mu, unless the server is closed) once d has passed
// on the server's clock. The returned function cancels it.
func (s *Server) after(d time.Duration, f func()) (cancel func()) {
	t := s.clock.NewTimer(d)
	stop := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-t.C():
			s.mu.Lock()
			if !s.closed {
				f()
			}
			s.unlock()
		case <-stop:
			t.Stop()
		case <-s.done:
			t.Stop()
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stop) }) }
}

// sleep waits d on the server's clock, or until ctx ends or the server
// closes; it reports whether the full d passed.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return s.clock.Sleep(ctx, d) == nil
}

func (s *Server) cloud(name string) (*cloud, error) {
	c := s.clouds[name]
	if c == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownCloud, name)
	}
	return c, nil
}

// Instances returns every instance of cloud, terminated ones still retained
// included, sorted by id.
func (s *Server) Instances(cloudName string) ([]Instance, error) {
	s.mu.Lock()
	defer s.unlock()
	c, err := s.cloud(cloudName)
	if err != nil {
		return nil, err
	}
	s.settleAll(c)
	out := make([]Instance, 0, len(c.instances))
	for _, in := range c.instances {
		out = append(out, in.view())
	}
	slices.SortFunc(out, func(a, b Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Instance returns one instance of cloud, terminated or not.
func (s *Server) Instance(cloudName, id string) (Instance, error) {
	s.mu.Lock()
	defer s.unlock()
	c, err := s.cloud(cloudName)
	if err != nil {
		return Instance{}, err
	}
	in := s.lookup(c, id)
	if in == nil {
		return Instance{}, fmt.Errorf("%w: %s in %s", ErrNotFound, id, cloudName)
	}
	return in.view(), nil
}

// SandboxDir returns the folder in which the SSH commands of instance id run
// (it exists once the instance has run).
func (s *Server) SandboxDir(cloudName, id string) string {
	return s.sandboxDir(cloudName, id)
}

// SideResources returns the firewalls, SSH keys and placement groups of
// cloud, sorted by name.
func (s *Server) SideResources(cloudName string) (Resources, error) {
	s.mu.Lock()
	defer s.unlock()
	c, err := s.cloud(cloudName)
	if err != nil {
		return Resources{}, err
	}
	return c.resources(), nil
}

// Preempt reclaims a running instance now, as a spot reclaim would: its SSH
// server stops, it reports "preempted" for Timing.DeleteTime and then
// "terminated", and its history says why.
func (s *Server) Preempt(cloudName, id string) error {
	s.mu.Lock()
	defer s.unlock()
	c, in, err := s.running(cloudName, id)
	if err != nil {
		return err
	}
	s.preempt(c, in, s.clock.Now(), "instance preempted: spot capacity was reclaimed by the provider")
	s.save()
	return nil
}

// running returns cloud cloudName and its running instance id, or an
// error wrapping ErrNotFound or ErrNotRunning. The caller holds s.mu.
func (s *Server) running(cloudName, id string) (*cloud, *instance, error) {
	c, err := s.cloud(cloudName)
	if err != nil {
		return nil, nil, err
	}
	in := s.lookup(c, id)
	if in == nil {
		return nil, nil, fmt.Errorf("%w: %s in %s", ErrNotFound, id, cloudName)
	}
	if in.Status != StatusRunning {
		return nil, nil, fmt.Errorf("%w: %s is %s", ErrNotRunning, id, in.Status)
	}
	return c, in, nil
}

// InjectGPUFault breaks a GPU of a running instance from now on, as its
// tools show it (an Xid 79 after it was accepted, say).
func (s *Server) InjectGPUFault(cloudName, id string, f GPUFault) error {
	if err := f.validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.unlock()
	c, in, err := s.running(cloudName, id)
	if err != nil {
		return err
	}
	if in.GPUCount <= 0 {
		return fmt.Errorf("simserver: %s has no GPUs to break", id)
	}
	now := s.clock.Now()
	for len(in.GPUFaultsAt) < len(in.GPUFaults) {
		in.GPUFaultsAt = append(in.GPUFaultsAt, time.Time{})
	}
	in.GPUFaults = append(in.GPUFaults, f)
	in.GPUFaultsAt = append(in.GPUFaultsAt, now)
	if s.opts.DisableSSH {
		// No sandbox: the fault shows in the instance's record only.
		s.save()
		return nil
	}
	if err := writeGPUs(s.sandboxDir(c.cfg.Name, in.ID), in, now); err != nil {
		return fmt.Errorf("simserver: emulated GPUs of %s: %w", id, err)
	}
	s.save()
	return nil
}

// SetFaults replaces the faults of cloud from now on (the token bucket
// starts full).
func (s *Server) SetFaults(cloudName string, f Faults) error {
	if err := f.validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.unlock()
	c, err := s.cloud(cloudName)
	if err != nil {
		return err
	}
	c.faults, c.limiter = f, f.newLimiter()
	return nil
}

// Faults returns the faults cloud injects now.
func (s *Server) Faults(cloudName string) (Faults, error) {
	s.mu.Lock()
	defer s.unlock()
	c, err := s.cloud(cloudName)
	if err != nil {
		return Faults{}, err
	}
	return c.faults, nil
}

// Stats returns what cloud's API has done so far.
func (s *Server) Stats(cloudName string) (Stats, error) {
	s.mu.Lock()
	defer s.unlock()
	c, err := s.cloud(cloudName)
	if err != nil {
		return Stats{}, err
	}
	return c.stats.clone(), nil
}

func (c *cloud) resources() Resources {
	r := Resources{Firewalls: []Firewall{}, SSHKeys: []SSHKey{}}
	for _, f := range c.firewalls {
		r.Firewalls = append(r.Firewalls, *f)
	}
	for _, k := range c.sshKeys {
		r.SSHKeys = append(r.SSHKeys, *k)
	}
	r.PlacementGroups = []PlacementGroup{}
	for _, g := range c.groups {
		r.PlacementGroups = append(r.PlacementGroups, *g)
	}
	slices.SortFunc(r.PlacementGroups, func(a, b PlacementGroup) int { return strings.Compare(a.Region+"/"+a.Name, b.Region+"/"+b.Name) })
	slices.SortFunc(r.Firewalls, func(a, b Firewall) int { return strings.Compare(a.Region+"/"+a.Name, b.Region+"/"+b.Name) })
	slices.SortFunc(r.SSHKeys, func(a, b SSHKey) int { return strings.Compare(a.Name, b.Name) })
	return r
}
