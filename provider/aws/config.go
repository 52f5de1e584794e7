package aws

import (
	"fmt"
	"time"

	"github.com/org/gpuprov/provider"
)

// fileConfig is Config as written in a config file ([aws] section),
// durations as strings.
type fileConfig struct {
	Profile           string   `toml:"profile" json:"profile"`
	Regions           []string `toml:"regions" json:"regions"`
	Spot              bool     `toml:"spot" json:"spot"`
	Image             string   `toml:"image" json:"image"`
	ImageParameter    string   `toml:"image_parameter" json:"image_parameter"`
	Subnet            string   `toml:"subnet" json:"subnet"`
	VPC               string   `toml:"vpc" json:"vpc"`
	Refine            bool     `toml:"refine" json:"refine"`
	SSHUser           string   `toml:"ssh_user" json:"ssh_user"`
	BootTimeout       string   `toml:"boot_timeout" json:"boot_timeout"`
	DeleteTimeout     string   `toml:"delete_timeout" json:"delete_timeout"`
	PollInterval      string   `toml:"poll_interval" json:"poll_interval"`
	ConsistencyWindow string   `toml:"consistency_window" json:"consistency_window"`
	RequestTimeout    string   `toml:"request_timeout" json:"request_timeout"`
	RequestsPerSecond float64  `toml:"requests_per_second" json:"requests_per_second"`
	Burst             int      `toml:"burst" json:"burst"`
}

// config converts f, naming the key of a duration that does not parse.
func (f fileConfig) config() (Config, error) {
	c := Config{Profile: f.Profile, Regions: f.Regions, Spot: f.Spot, Image: f.Image, ImageParameter: f.ImageParameter,
		Subnet: f.Subnet, VPC: f.VPC, Refine: f.Refine, SSHUser: f.SSHUser,
		RequestsPerSecond: f.RequestsPerSecond, Burst: f.Burst}
	for _, d := range []struct {
		name string
		in   string
		out  *time.Duration
	}{
		{"boot_timeout", f.BootTimeout, &c.BootTimeout},
		{"delete_timeout", f.DeleteTimeout, &c.DeleteTimeout},
		{"poll_interval", f.PollInterval, &c.PollInterval},
		{"consistency_window", f.ConsistencyWindow, &c.ConsistencyWindow},
		{"request_timeout", f.RequestTimeout, &c.RequestTimeout},
	} {
		if d.in == "" {
			continue
		}
		v, err := time.ParseDuration(d.in)
		if err != nil {
			return c, fmt.Errorf("%s: %w", d.name, err)
		}
		*d.out = v
	}
	return c, nil
}

func init() {
	provider.Register(ID, factory)
}

// factory builds the provider from its [aws] section: credentials come from
// the SDK's default chain, starting at the configured profile.
func factory(s provider.Settings) (provider.CloudProvider, error) {
	var fc fileConfig
	if err := s.DecodeInto(&fc); err != nil {
		return nil, fmt.Errorf("aws: config: %w", err)
	}
	cfg, err := fc.config()
	if err != nil {
		return nil, fmt.Errorf("aws: config: %w", err)
	}
	return New(cfg, WithName(s.Name), WithInstallation(s.Installation), WithLogger(s.Logger))
}
