package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCLIBadInput checks that bad input exits 2 with a one-line error naming
// the problem, and creates nothing: no journal, no key, no instance.
func TestCLIBadInput(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simTimings)
	good := sim.config

	const extra = "\n[extra]\ntype = \"sim\"\nendpoint = \"http://127.0.0.1:1\"\napi_key = \"k\"\nregionz = [\"x\"]\n"
	blocker := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		config  string // "" leaves no config file
		env     []string
		args    []string
		want    []string // substrings of stderr
		not     []string // what stderr must not say
		oneLine bool
	}{
		{name: "unknown GPU", config: good, args: []string{"up", "--gpu", "nosuchgpu", "--name", "x1"},
			want: []string{"gpu", "nosuchgpu"}, oneLine: true},
		{name: "bad VM name", config: good, args: []string{"up", "--gpu", "h100", "--name", "Bad_Name"},
			want: []string{"name", "Bad_Name"}, oneLine: true},
		{name: "bad VM name for down", config: good, args: []string{"down", "Bad_Name"}, want: []string{"name"}, oneLine: true},
		{name: "unknown provider", config: good, args: []string{"up", "--gpu", "h100", "--provider", "nope"},
			want: []string{"nope", "not configured"}, oneLine: true},
		{name: "bad flag value", config: good, args: []string{"up", "--gpu", "h100", "--count", "many"}, want: []string{"count"}},
		{name: "unknown flag", config: good, args: []string{"list", "--bogus"}, want: []string{"bogus"}},
		{name: "unknown command", config: good, args: []string{"launch"}, want: []string{"launch"}},
		{name: "on-interruption without spot", config: good, args: []string{"up", "--gpu", "h100", "--name", "s1", "--on-interruption", "replace"},
			want: []string{"on_interruption", "only spot VMs are watched"}, oneLine: true},
		{name: "unknown on-interruption policy", config: good, args: []string{"up", "--gpu", "h100", "--name", "s1", "--spot", "--on-interruption", "sometimes"},
			want: []string{"on_interruption", `"sometimes"`, "replace-at-reclaim"}, oneLine: true},
		{name: "idle timeout zero", config: good, args: []string{"up", "--gpu", "h100", "--name", "i1", "--idle-timeout", "0"},
			want: []string{"--idle-timeout 0"}, oneLine: true},
		{name: "busy command without idle timeout", config: good, args: []string{"up", "--gpu", "h100", "--name", "i1", "--busy-command", "true"},
			want: []string{"idle_timeout", "busy_command"}, oneLine: true},
		{name: "cost by an unknown key", config: good, args: []string{"cost", "--by", "week"}, want: []string{`--by "week"`}, oneLine: true},
		{name: "volume without a mount path", config: good, args: []string{"up", "--gpu", "h100", "--name", "v1", "--volume", "data:10"},
			want: []string{`--volume "data:10"`, "NAME:SIZE_GB:MOUNT_PATH"}, oneLine: true},
		{name: "volume with a relative mount path", config: good, args: []string{"up", "--gpu", "h100", "--name", "v1", "--volume", "data:10:data"},
			want: []string{"volumes[0].mount_path", `"data"`}, oneLine: true},
		{name: "volume size not a number", config: good, args: []string{"up", "--gpu", "h100", "--name", "v1", "--volume", "data:big:/data"},
			want: []string{`size "big"`}, oneLine: true},
		{name: "watch interval zero", config: good, args: []string{"recover", "--watch", "--interval", "0"}, want: []string{"--interval 0"}, oneLine: true},
		{name: "down without VMs", config: good, args: []string{"down"}, want: []string{"--all"}, oneLine: true},
		{name: "bad output format", config: good, args: []string{"list", "-o", "yaml"}, want: []string{"yaml"}, oneLine: true},
		{name: "unknown key in a provider table", config: good + extra, args: []string{"up", "--gpu", "h100"},
			want: []string{`"extra.regionz"`, "config.toml:" + strconv.Itoa(lineOf(good+extra, "regionz")) + ":"}, oneLine: true},
		{name: "unknown top-level key", config: "jurnal = \"x\"\n" + good, args: []string{"list"},
			want: []string{`"jurnal"`, "config.toml:1:"}, oneLine: true},
		{name: "unknown adapter", config: "[nocloud]\nkey = 1\n", args: []string{"list"},
			want: []string{"config.toml:1:", "nocloud", "sim"}, oneLine: true},
		{name: "malformed TOML", config: good + "\n[broken\n", args: []string{"list"}, want: []string{"config.toml:"}, oneLine: true},
		// A typed zero is refused wherever it was typed; only an absent flag takes the default.
		{name: "count zero", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--count", "0"},
			want: []string{"--count 0", "1 to 64"}, oneLine: true},
		{name: "count negative", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--count", "-2"},
			want: []string{"--count -2"}, oneLine: true},
		{name: "max-price zero", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--max-price", "0"},
			want: []string{"--max-price 0", "leave the flag out for no limit"}, oneLine: true},
		{name: "max-price negative", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--max-price=-1"},
			want: []string{"--max-price -1"}, oneLine: true},
		{name: "timeout zero", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--timeout", "0s"},
			want: []string{"--timeout 0s"}, oneLine: true},
		{name: "nodes zero", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--nodes", "0"},
			want: []string{"--nodes 0", "1 to 1000"}, oneLine: true},
		{name: "min-nodes zero", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--nodes", "2", "--min-nodes", "0"},
			want: []string{"--min-nodes 0"}, oneLine: true},
		{name: "min-nodes without nodes", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--min-nodes", "1"},
			want: []string{"--min-nodes needs --nodes"}, oneLine: true},
		{name: "placement without nodes", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--placement", "compact"},
			want: []string{"--placement needs --nodes"}, oneLine: true},
		{name: "unknown placement", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--nodes", "2", "--placement", "tight"},
			want: []string{`--placement "tight": want one of any, same-region, same-zone, compact`}, oneLine: true},
		{name: "placed with a partial minimum", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--nodes", "3", "--min-nodes", "2", "--placement", "same-zone"},
			want: []string{"all or nothing"}, oneLine: true},
		{name: "ttl zero", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--ttl", "0s"},
			want: []string{"--ttl 0s", "leave the flag out"}, oneLine: true},
		{name: "max-cost zero", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--max-cost", "0"},
			want: []string{"--max-cost 0", "leave the flag out"}, oneLine: true},
		{name: "wait-poll without wait", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--wait-poll", "10s"},
			want: []string{"--wait-poll needs --wait"}, oneLine: true},
		{name: "wait-poll zero", config: good, args: []string{"up", "--gpu", "h100", "--name", "z1", "--wait", "--wait-poll", "0s"},
			want: []string{"--wait-poll 0s"}, oneLine: true},
		{name: "offers count zero", config: good, args: []string{"offers", "--gpu", "h100", "--count", "0"},
			want: []string{"--count 0"}, oneLine: true},
		{name: "offers max-price zero", config: good, args: []string{"offers", "--gpu", "h100", "--max-price", "0"},
			want: []string{"--max-price 0"}, oneLine: true},
		{name: "demo nodes zero", args: []string{"demo", "--nodes", "0"}, want: []string{"--nodes 0"}, oneLine: true},
		{name: "sweep negative grace", config: good, args: []string{"sweep", "--grace", "-1m"},
			want: []string{"--grace -1m0s"}, oneLine: true},
		// A GPU typo suggests the nearest name instead of listing the table.
		{name: "GPU typo", config: good, args: []string{"up", "--gpu", "H1OO", "--name", "x1"},
			want: []string{`unknown GPU "H1OO": did you mean H100-80GB?`}, not: []string{"known:", "A6000"}, oneLine: true},
		// GPU alternatives are checked one by one, each named by its place.
		{name: "unknown GPU among the alternatives", config: good, args: []string{"up", "--gpu", "h100,x100", "--name", "x1"},
			want: []string{`gpus[1]: unknown GPU "x100": did you mean`}, oneLine: true},
		{name: "unknown first alternative", config: good, args: []string{"up", "--gpu", "x100,h100"},
			want: []string{`gpus[0]: unknown GPU "x100"`}, oneLine: true},
		{name: "alternative given twice", config: good, args: []string{"up", "--gpu", "h100,H100-80GB:1", "--name", "x1"},
			want: []string{"gpus[1]: H100-80GB×1 is gpus[0] already"}, oneLine: true},
		{name: "bad count of an alternative", config: good, args: []string{"up", "--gpu", "h100:two,a100-80gb", "--name", "x1"},
			want: []string{`--gpu "h100:two,a100-80gb": "two" is not a count of h100: want 1 to 64 GPUs`}, oneLine: true},
		{name: "zero count of an alternative", config: good, args: []string{"up", "--gpu", "h100,a100-80gb:0", "--name", "x1"},
			want: []string{`"0" is not a count of a100-80gb`}, oneLine: true},
		{name: "empty alternative", config: good, args: []string{"up", "--gpu", "h100,,l4", "--name", "x1"},
			want: []string{"alternative 2 has no GPU"}, oneLine: true},
		{name: "unknown GPU order", config: good, args: []string{"up", "--gpu", "h100,l4", "--gpu-order", "cheapest", "--name", "x1"},
			want: []string{`gpu_order: "cheapest": want "price" (the default) or "given"`}, oneLine: true},
		{name: "alternatives for a cluster", config: good, args: []string{"up", "--gpu", "h100,l4", "--nodes", "2", "--name", "k1"},
			want: []string{"with --nodes: a cluster's nodes share one GPU model"}, oneLine: true},
		{name: "offers with an unknown alternative", config: good, args: []string{"offers", "--gpu", "h100,x100"},
			want: []string{`gpus[1]: unknown GPU "x100"`}, oneLine: true},
		// Names are checked alike by every command, before anything is opened.
		{name: "bad VM name for show", config: good, args: []string{"show", "Bad_Name"}, want: []string{"name", "Bad_Name"}, oneLine: true},
		{name: "bad VM name for health", config: good, args: []string{"health", "Bad_Name"}, want: []string{"name", "Bad_Name"}, oneLine: true},
		{name: "bad VM name for ssh", config: good, args: []string{"ssh", "Bad_Name"}, want: []string{"name", "Bad_Name"}, oneLine: true},
		// A value of the wrong type names the key, the line and the types.
		{name: "wrong type in a provider table", config: strings.Replace(good, "poll_interval", "requests_per_second = \"fast\"\npoll_interval", 1),
			args: []string{"list"}, want: []string{"config.toml:" + strconv.Itoa(lineOf(good, "poll_interval")) + `: key "sim-a.requests_per_second": want a number, got a string`}, oneLine: true},
		{name: "wrong type at the top", config: "default_regions = \"us-east\"\n" + good, args: []string{"list"},
			want: []string{`config.toml:1: key "default_regions": want a list of strings, got a string`}, oneLine: true},
		{name: "no config", args: []string{"up", "--gpu", "h100"}, want: []string{"no providers configured", "gpuprov demo", "sim serve", "[sim-a]"}},
		{name: "state directory cannot be created", config: good, env: []string{"XDG_STATE_HOME=" + filepath.Join(blocker, "state")},
			args: []string{"up", "--gpu", "h100", "--name", "x2"}, want: []string{"cannot create journal directory", blocker, "not a directory"}, oneLine: true},
		{name: "journal directory cannot be created", config: "journal = \"sqlite:" + filepath.Join(blocker, "j", "journal.db") + "\"\n" + good,
			args: []string{"list"}, want: []string{"journal directory", filepath.Join(blocker, "j")}, oneLine: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLIEnv(t)
			if tt.config != "" {
				c.writeConfig(tt.config)
			}
			cmd := c.command(tt.args...)
			cmd.Env = append(cmd.Env, tt.env...)
			r := c.runCmd(cmd, tt.args)
			if r.code != 2 {
				t.Fatalf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(r.stderr, w) {
					t.Errorf("stderr has %q:\n%s", w, r.stderr)
				}
			}
			if strings.Contains(r.stderr, "struct") || strings.Contains(r.stderr, ": gpuprov: ") || strings.HasPrefix(r.stderr, "gpuprov: gpuprov: ") {
				t.Errorf("want one sentence with one prefix, got:\n%s", r.stderr)
			}
			if tt.oneLine && strings.Count(strings.TrimSuffix(r.stderr, "\n"), "\n") != 0 {
				t.Errorf("want a one-line error, got:\n%s", r.stderr)
			}
			if _, err := os.Stat(c.stateDir()); err == nil {
				t.Errorf("%s was created", c.stateDir())
			}
		})
	}
	if live := sim.live(t); len(live) != 0 {
		t.Errorf("bad input created instances: %+v", live)
	}
	if _, err := os.Stat(filepath.Join(blocker, "j")); err == nil {
		t.Errorf("a journal directory was created under %s", blocker)
	}
}

// lineOf is the line (from 1) of the first occurrence of s in doc.
func lineOf(doc, s string) int { return strings.Count(doc[:strings.Index(doc, s)], "\n") + 1 }
