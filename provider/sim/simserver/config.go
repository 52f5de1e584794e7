package simserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/org/gpuprov/clock"
)

// Options configure a Server. The zero value is a server with no clouds;
// start from DefaultOptions for a demo.
type Options struct {
	// Addr is the listen address. It must be a loopback address; empty
	// means 127.0.0.1:0 (a free port).
	Addr string `json:"addr,omitempty" toml:"addr,omitempty"`
	// AdminToken authenticates /admin requests. Empty: the token kept in
	// StateFile, else a generated one.
	AdminToken string `json:"admin_token,omitempty" toml:"admin_token,omitempty"`
	// Clouds are the clouds (accounts) the server serves, each under
	// /clouds/{name}/v1/.
	Clouds []CloudConfig `json:"clouds" toml:"clouds"`
	// Timing is the timing of every cloud whose CloudConfig.Timing is nil;
	// nil means DefaultTiming(). A non-nil Timing is taken as is: its zero
	// durations are instant.
	Timing *Timing `json:"timing,omitempty" toml:"timing,omitempty"`
	// StateFile, when set, holds the whole state (instances, side
	// resources, counters, generated keys and the instances' SSH host keys).
	// It is rewritten atomically after every mutation and loaded at start.
	StateFile string `json:"state_file,omitempty" toml:"state_file,omitempty"`
	// SaveInterval, when positive, batches the rewrites of StateFile: a
	// mutation marks the state dirty and a background writer saves it at
	// most once per interval (wall clock), and Close saves the rest. Zero
	// rewrites it after every mutation, which with a thousand instances
	// costs a megabyte-sized write and an fsync per API call. A server
	// killed with SIGKILL loses at most the last interval's mutations.
	SaveInterval Duration `json:"save_interval,omitempty" toml:"save_interval,omitempty"`
	// StateDir holds one sandbox folder per instance. Empty: next to
	// StateFile (StateFile + ".d"), else a temporary folder removed by Close.
	StateDir string `json:"state_dir,omitempty" toml:"state_dir,omitempty"`
	// DisableSSH turns the per-instance SSH servers off (for scale runs):
	// no server starts, and running instances report the placeholder
	// endpoint 127.0.0.1:DisabledSSHPort, where nothing of the simulator
	// listens, so that an engine without a connect phase counts them ready.
	DisableSSH bool `json:"disable_ssh,omitempty" toml:"disable_ssh,omitempty"`
	// Seed seeds the random faults and boot jitter (0 means 1), so a run
	// with the same calls in the same order is reproducible.
	Seed uint64 `json:"seed,omitempty" toml:"seed,omitempty"`
	// Retention is how long a terminated instance still answers
	// GET instances/{id}. Zero means one hour.
	Retention Duration `json:"retention,omitempty" toml:"retention,omitempty"`
	// SandboxEnv is added to the environment of every command run over SSH,
	// after the defaults (HOME, USER, PATH with the sandbox's bin folder
	// first, GPUPROV_SIM_CLOUD, GPUPROV_SIM_INSTANCE, GPUPROV_SIM_METADATA).
	SandboxEnv []string `json:"sandbox_env,omitempty" toml:"sandbox_env,omitempty"`
	// PrepareSandbox, when set, is called once for each new sandbox folder
	// (it has an empty bin/ folder that is first on PATH) before the
	// instance's SSH server starts: the hook for emulated tools such as k3s.
	// An error fails the instance's boot. It runs with the server's lock
	// held, so it must not call the Server's methods.
	PrepareSandbox func(dir string, inst Instance) error `json:"-" toml:"-"`
	// Clock is the time source; nil means the wall clock. With a fake clock
	// every latency, boot, delete, lag and retention runs on virtual time.
	Clock clock.Clock `json:"-" toml:"-"`
	// Logger receives the server's logs (never keys); nil discards them.
	Logger *slog.Logger `json:"-" toml:"-"`
}

// DisabledSSHPort is the port of the endpoint running instances report
// when Options.DisableSSH is set: the discard port, on which no server of
// the simulator listens.
const DisabledSSHPort = 9

// CloudConfig is one simulated cloud account.
type CloudConfig struct {
	// Name is the cloud's path segment: /clouds/{name}/v1/.
	Name string `json:"name" toml:"name"`
	// APIKey is the bearer token of the account. Empty: the key kept in
	// the state file, else a generated one.
	APIKey string `json:"api_key,omitempty" toml:"api_key,omitempty"`
	// Offers is the catalog. Empty means DefaultCatalog(Name).
	Offers []Offer `json:"offers,omitempty" toml:"offers,omitempty"`
	// IgnoreIdempotencyToken makes create ignore idempotency_token, like a
	// cloud without one: a replayed create launches a second instance.
	IgnoreIdempotencyToken bool `json:"ignore_idempotency_token,omitempty" toml:"ignore_idempotency_token,omitempty"`
	// SSHUser is the login user when a create names none ("ubuntu" if empty).
	SSHUser string `json:"ssh_user,omitempty" toml:"ssh_user,omitempty"`
	// Timing sets the latencies; nil means Options.Timing, else
	// DefaultTiming(). A non-nil Timing is taken as is: its zero durations
	// are instant.
	Timing *Timing `json:"timing,omitempty" toml:"timing,omitempty"`
	// Faults are the faults injected from the start; see Faults.
	Faults Faults `json:"faults,omitzero" toml:"faults,omitempty"`
	// Reservations are capacity the account holds (GET reservations;
	// a create with reservation_id launches into one).
	Reservations []Reservation `json:"reservations,omitempty" toml:"reservations,omitempty"`
	// Quotas limit the GPUs the account may run per region (GET quotas;
	// a create past one is refused with quota_exceeded).
	Quotas []Quota `json:"quotas,omitempty" toml:"quotas,omitempty"`
	// BlockOfferings are capacity blocks the cloud sells (GET
	// block-offerings, POST block-purchases).
	BlockOfferings []BlockOffering `json:"block_offerings,omitempty" toml:"block_offerings,omitempty"`
}

// Timing is how long the simulated cloud takes.
type Timing struct {
	// APILatency is added to every API request.
	APILatency Duration `json:"api_latency,omitempty" toml:"api_latency,omitempty"`
	// BootTime is create → running (a third provisioning, then booting),
	// plus or minus a uniform BootJitter.
	BootTime Duration `json:"boot_time,omitempty" toml:"boot_time,omitempty"`
	// BootJitter spreads BootTime uniformly by up to this much either way.
	BootJitter Duration `json:"boot_jitter,omitempty" toml:"boot_jitter,omitempty"`
	// DeleteTime is how long a deleted instance stays "stopping" (before
	// Faults.SlowDelete is added), and a preempted one "preempted", before
	// it turns "terminated".
	DeleteTime Duration `json:"delete_time,omitempty" toml:"delete_time,omitempty"`
	// FlexQueue is how long a flex-start create waits in the queue before
	// it finds capacity and starts provisioning; zero: at once.
	FlexQueue Duration `json:"flex_queue,omitempty" toml:"flex_queue,omitempty"`
	// VolumeTime is how long a new volume is "creating" before it is
	// "available"; zero: at once.
	VolumeTime Duration `json:"volume_time,omitempty" toml:"volume_time,omitempty"`
}

// DefaultTiming is realistic but short: API 5ms, boot 1.5s±0.5s, delete
// 300ms, volume creation 200ms.
func DefaultTiming() Timing {
	return Timing{
		APILatency: Duration(5 * time.Millisecond),
		BootTime:   Duration(1500 * time.Millisecond),
		BootJitter: Duration(500 * time.Millisecond),
		DeleteTime: Duration(300 * time.Millisecond),
		VolumeTime: Duration(200 * time.Millisecond),
	}
}

// Offer is one entry of a cloud's catalog, as GET offers returns it and as
// a [[clouds.offers]] table of an options file sets it.
type Offer struct {
	// ID is unique within the cloud; fault lists (StockoutOffers,
	// BootFailOffers) name offers by it.
	ID string `json:"id" toml:"id"`
	// Region is what region filters, quotas and region faults match;
	// Zone is informational.
	Region       string `json:"region" toml:"region"`
	Zone         string `json:"zone,omitempty" toml:"zone,omitempty"`
	InstanceType string `json:"instance_type" toml:"instance_type"`
	// GPU is a canonical name (see provider.GPUNames), GPUCount GPUs of
	// GPUMemoryGB each.
	GPU          string  `json:"gpu" toml:"gpu"`
	GPUCount     int     `json:"gpu_count" toml:"gpu_count"`
	GPUMemoryGB  int     `json:"gpu_memory_gb" toml:"gpu_memory_gb"`
	VCPUs        int     `json:"vcpus" toml:"vcpus"`
	MemoryGB     float64 `json:"memory_gb" toml:"memory_gb"`
	PricePerHour float64 `json:"price_per_hour" toml:"price_per_hour"` // USD
	// Spot offers may be preempted (Faults.PreemptionRate, Server.Preempt).
	Spot bool `json:"spot" toml:"spot"`
	// DiskGB is the boot disk an instance gets unless its create asks for
	// a larger one; 0 means DefaultDiskGB.
	DiskGB int `json:"disk_gb,omitempty" toml:"disk_gb,omitempty"`
	// Availability is a hint ("high", "medium", "low"), not a promise, as
	// marketplaces publish their stock. While a stockout fault covers the
	// offer (Faults.StockoutOffers, StockoutRegions) the listing says
	// "none", as the sim's stock; creates fail whatever it says.
	Availability string `json:"availability" toml:"availability"`
	// FlexStart says a create may queue for the offer (max_run_seconds):
	// the cloud's flex-start, modelled on GCP's.
	FlexStart bool `json:"flex_start,omitempty" toml:"flex_start,omitempty"`
	// Host, when set, is the one machine the offer is (a marketplace's
	// listing): its instances run there, and GPU faults can name it.
	Host string `json:"host,omitempty" toml:"host,omitempty"`
}

// Duration is a time.Duration written as a string ("1.5s", "300ms") in JSON
// and TOML files.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String renders d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText renders d like time.Duration.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses a time.ParseDuration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// DefaultOptions serves two clouds, "sim-a" and "sim-b", with different
// catalogs over a few regions, DefaultTiming and no faults. The cheapest
// H100-80GB offer is on sim-a and the next one on sim-b, so a demo that
// stocks out the first fails over across clouds.
func DefaultOptions() Options {
	return Options{Clouds: []CloudConfig{
		{Name: "sim-a", Offers: DefaultCatalog("sim-a")},
		{Name: "sim-b", Offers: DefaultCatalog("sim-b")},
	}}
}

// LoadOptions reads Options from a JSON file (.json) or a TOML file (any
// other extension). Unknown keys are an error naming them.
func LoadOptions(path string) (Options, error) {
	var o Options
	b, err := os.ReadFile(path)
	if err != nil {
		return o, fmt.Errorf("simserver: %w", err)
	}
	if strings.EqualFold(filepath.Ext(path), ".json") {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(&o)
	} else {
		dec := toml.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(&o)
		var strict *toml.StrictMissingError
		if errors.As(err, &strict) {
			var keys []string
			for _, e := range strict.Errors {
				keys = append(keys, strings.Join(e.Key(), "."))
			}
			err = fmt.Errorf("unknown keys: %s", strings.Join(keys, ", "))
		}
	}
	if err != nil {
		return o, fmt.Errorf("simserver: %s: %w", path, err)
	}
	return o, nil
}

// validate checks o and fills defaults into a copy.
func (o Options) validate() (Options, error) {
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Retention == 0 {
		o.Retention = Duration(time.Hour)
	}
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	seen := map[string]bool{}
	clouds := make([]CloudConfig, len(o.Clouds))
	for i, c := range o.Clouds {
		if c.Name == "" || strings.ContainsAny(c.Name, "/?# ") {
			return o, fmt.Errorf("simserver: invalid cloud name %q", c.Name)
		}
		if seen[c.Name] {
			return o, fmt.Errorf("simserver: cloud %q configured twice", c.Name)
		}
		seen[c.Name] = true
		if len(c.Offers) == 0 {
			c.Offers = DefaultCatalog(c.Name)
		}
		ids := map[string]bool{}
		for _, of := range c.Offers {
			if of.ID == "" || ids[of.ID] {
				return o, fmt.Errorf("simserver: cloud %s: empty or duplicate offer id %q", c.Name, of.ID)
			}
			ids[of.ID] = true
		}
		if err := validateCapacity(&c, ids); err != nil {
			return o, err
		}
		if c.Timing == nil {
			t := DefaultTiming()
			if o.Timing != nil {
				t = *o.Timing
			}
			c.Timing = &t
		}
		if c.SSHUser == "" {
			c.SSHUser = "ubuntu"
		}
		clouds[i] = c
	}
	o.Clouds = clouds
	return o, nil
}
