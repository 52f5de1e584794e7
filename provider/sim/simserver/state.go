package simserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// stateVersion is the version of the state file's format.
const stateVersion = 1

// stateFile is the whole persisted state. It holds secrets (API keys, the
// admin token, the instances' private host keys): it is written 0600.
type stateFile struct {
	Version    int                    `json:"version"`
	AdminToken string                 `json:"admin_token"`
	Clouds     map[string]*cloudState `json:"clouds"`
}

type cloudState struct {
	APIKey    string           `json:"api_key"`
	Counter   int              `json:"counter"`
	Stats     Stats            `json:"stats"`
	Instances []*instance      `json:"instances"`
	Firewalls []Firewall       `json:"firewalls"`
	Groups    []PlacementGroup `json:"placement_groups,omitempty"`
	SSHKeys   []SSHKey         `json:"ssh_keys"`
	// Bought are the blocks bought, Sold the offerings they were.
	Bought []Reservation `json:"bought_blocks,omitempty"`
	Sold   []string      `json:"sold_block_offerings,omitempty"`
	// Volumes are the cloud's volumes (their data is in the state dir's
	// volumes folder), VolumeCounter the last volume id's number.
	Volumes       []*volume `json:"volumes,omitempty"`
	VolumeCounter int       `json:"volume_counter,omitempty"`
}

// load reads opts.StateFile into the clouds configured; a missing file is
// an empty state. Keys configured in Options win over the persisted ones.
// Faults are not persisted: a restarted server injects the configured ones.
func (s *Server) load() error {
	if s.opts.StateFile == "" {
		return nil
	}
	b, err := os.ReadFile(s.opts.StateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("simserver: load state: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("simserver: load state %s: %w", s.opts.StateFile, err)
	}
	if st.Version != stateVersion {
		return fmt.Errorf("simserver: state %s has version %d, want %d", s.opts.StateFile, st.Version, stateVersion)
	}
	if s.adminToken == "" {
		s.adminToken = st.AdminToken
	}
	for name, cs := range st.Clouds {
		c := s.clouds[name]
		if c == nil {
			s.log.Warn("simserver: state holds a cloud that is not configured; its instances are dropped", "cloud", name, "instances", len(cs.Instances))
			continue
		}
		if c.apiKey == "" {
			c.apiKey = cs.APIKey
		}
		c.counter = cs.Counter
		c.bought = cs.Bought
		for _, id := range cs.Sold {
			c.sold[id] = true
		}
		if cs.Stats.Calls != nil {
			c.stats = cs.Stats.clone()
		}
		for _, in := range cs.Instances {
			c.instances[in.ID] = in
			c.index(in)
			if in.Token != "" {
				c.tokens[in.Token] = in.ID
			}
		}
		for i := range cs.Firewalls {
			f := cs.Firewalls[i]
			if len(f.Sources) == 0 { // saved before firewalls had sources
				f.Sources = slices.Clone(DefaultSources)
			}
			c.firewalls[firewallKey(f.Region, f.Name)] = &f
		}
		for i := range cs.SSHKeys {
			k := cs.SSHKeys[i]
			c.sshKeys[k.Name] = &k
		}
		c.volumeCounter = cs.VolumeCounter
		for _, v := range cs.Volumes {
			c.volumes[v.ID] = v
			if v.Token != "" {
				c.volumeTokens[v.Token] = v.ID
			}
		}
		for i := range cs.Groups {
			g := cs.Groups[i]
			c.groups[firewallKey(g.Region, g.Name)] = &g
		}
	}
	return nil
}

// save writes the state after a mutation, logging a failure: the API call
// that mutated the state has happened either way. With SaveInterval set it
// only marks the state dirty for the background writer. The caller holds
// s.mu.
func (s *Server) save() {
	if s.opts.SaveInterval > 0 {
		s.dirty = true
		return
	}
	if err := s.saveLocked(); err != nil {
		s.log.Error("simserver: save state", "err", err)
	}
}

// saveLocked writes the whole state atomically (temp file, fsync, rename)
// with mode 0600. The caller holds s.mu.
func (s *Server) saveLocked() error {
	b, err := s.encodeLocked()
	if err != nil || b == nil {
		return err
	}
	s.dirty = false
	return s.writeState(b)
}

// saveLoop writes the state at most once per SaveInterval while it is
// dirty, encoding it under s.mu and writing it outside, until the server
// closes (Close writes the last of it).
func (s *Server) saveLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.SaveInterval.Std())
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.mu.Lock()
		var b []byte
		var err error
		if s.dirty && !s.closed {
			b, err = s.encodeLocked()
			s.dirty = false
		}
		s.unlock()
		if err == nil && b != nil {
			err = s.writeState(b)
		}
		if err != nil {
			s.log.Error("simserver: save state", "err", err)
		}
	}
}

// encodeLocked returns the state file's content, or nil without a state
// file. The caller holds s.mu.
func (s *Server) encodeLocked() ([]byte, error) {
	if s.opts.StateFile == "" {
		return nil, nil
	}
	st := stateFile{Version: stateVersion, AdminToken: s.adminToken, Clouds: map[string]*cloudState{}}
	for name, c := range s.clouds {
		r := c.resources()
		cs := &cloudState{APIKey: c.apiKey, Counter: c.counter, Stats: c.stats, Firewalls: r.Firewalls, SSHKeys: r.SSHKeys, Groups: r.PlacementGroups,
			Instances: make([]*instance, 0, len(c.instances)), Bought: slices.Clone(c.bought), Sold: slices.Sorted(maps.Keys(c.sold))}
		for _, in := range c.instances {
			cs.Instances = append(cs.Instances, in)
		}
		cs.VolumeCounter = c.volumeCounter
		for _, id := range slices.Sorted(maps.Keys(c.volumes)) {
			cs.Volumes = append(cs.Volumes, c.volumes[id])
		}
		st.Clouds[name] = cs
	}
	b, err := json.Marshal(&st)
	if err != nil {
		return nil, fmt.Errorf("simserver: save state: %w", err)
	}
	return b, nil
}

// writeState writes b to the state file atomically (temp file, fsync,
// rename) with mode 0600.
func (s *Server) writeState(b []byte) error {
	dir := filepath.Dir(s.opts.StateFile)
	f, err := os.CreateTemp(dir, ".simserver-state-*")
	if err != nil {
		return fmt.Errorf("simserver: save state: %w", err)
	}
	tmp := f.Name()
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(b)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.opts.StateFile)
	}
	if err != nil {
		_ = os.Remove(tmp) // best effort: the temp file is garbage either way
		return fmt.Errorf("simserver: save state: %w", err)
	}
	return nil
}

func firewallKey(region, name string) string { return region + "/" + name }
