package gpu

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Probe is what the probe script saw on a machine.
type Probe struct {
	// GPUs are the GPUs nvidia-smi answered for, in its order.
	GPUs []GPU `json:"gpus"`
	// QueryRC is nvidia-smi's exit status for the GPU query; QueryError is
	// what it printed instead of GPUs (the driver's own words), if anything.
	QueryRC    int    `json:"query_rc"`
	QueryError string `json:"query_error,omitempty"`
	// Lost are the GPUs nvidia-smi named but could not read ("Unable to
	// determine the device handle for GPU…", "GPU is lost"), by bus id.
	Lost []string `json:"lost,omitempty"`
	// QGPUs are the GPUs as nvidia-smi -q describes them, the same facts
	// as the query's (for a machine whose query failed, and to check one
	// against the other). FromQ is true when GPUs were taken from QGPUs
	// because the query listed none.
	QGPUs []GPU `json:"q_gpus,omitempty"`
	FromQ bool  `json:"from_q,omitempty"`
	// Unknown are the fields of Fields the driver did not know (it was
	// asked the base fields instead).
	Unknown []string `json:"unknown,omitempty"`
	// Driver and CUDA are the driver's version and the CUDA version it
	// supports (from nvidia-smi -q).
	Driver string `json:"driver,omitempty"`
	CUDA   string `json:"cuda,omitempty"`
	// Fabric is each GPU's fabric state and status from nvidia-smi -q, by
	// bus id; absent where -q has no Fabric section.
	Fabric map[string]Fabric `json:"fabric,omitempty"`
	// Bus lists the NVIDIA devices on the PCI bus; BusRead is false when
	// the bus could not be read.
	Bus     []Device `json:"bus,omitempty"`
	BusRead bool     `json:"bus_read"`
	// FabricManager is `systemctl is-active nvidia-fabricmanager` where an
	// NVSwitch is on the bus: active, inactive, failed, activating, ...
	// ("" where it was not asked or systemd could not say: then
	// FabricManagerWhy says what systemctl printed instead).
	FabricManager    string `json:"fabric_manager,omitempty"`
	FabricManagerWhy string `json:"fabric_manager_why,omitempty"`
	// Xids are the Xid lines of the kernel log since boot; XidRead is false
	// when no kernel log was readable.
	Xids    []Xid `json:"xids,omitempty"`
	XidRead bool  `json:"xid_read"`
	// BootID identifies the boot the probe ran in.
	BootID string `json:"boot_id,omitempty"`
	// DCGM is the diagnostic's result, where it was asked for.
	DCGM *DCGM `json:"dcgm,omitempty"`
}

// GPU is one GPU's row of the query. A nil pointer field is one the GPU
// did not report: its reason ("[N/A]", "[Not Supported]", not known to the
// driver) is in NA.
type GPU struct {
	Index        int               `json:"index"`
	UUID         string            `json:"uuid,omitempty"`
	Serial       string            `json:"serial,omitempty"`
	Name         string            `json:"name,omitempty"`
	BusID        string            `json:"bus_id,omitempty"` // normalized: 0000:8a:00.0
	MemoryMiB    *int64            `json:"memory_mib,omitempty"`
	Driver       string            `json:"driver,omitempty"`
	ECCMode      string            `json:"ecc_mode,omitempty"`
	Uncorrected  *int64            `json:"uncorrected_volatile,omitempty"`
	RetiredPend  *bool             `json:"retired_pending,omitempty"`
	RemapPending *bool             `json:"remap_pending,omitempty"`
	RemapFailure *bool             `json:"remap_failure,omitempty"`
	LinkGen      *int64            `json:"link_gen,omitempty"`
	LinkGenMax   *int64            `json:"link_gen_max,omitempty"`
	LinkWidth    *int64            `json:"link_width,omitempty"`
	LinkWidthMax *int64            `json:"link_width_max,omitempty"`
	Throttle     *uint64           `json:"throttle,omitempty"`
	TempC        *int64            `json:"temp_c,omitempty"`
	NA           map[string]string `json:"na,omitempty"`
}

// Fabric is a GPU's fabric state on an NVSwitch system.
type Fabric struct {
	State  string `json:"state"`
	Status string `json:"status"`
}

// Device is one NVIDIA device on the PCI bus.
type Device struct {
	Addr   string `json:"addr"`   // 0000:8a:00.0
	Class  string `json:"class"`  // 0302 (3D controller), 0300 (VGA), 0680 (bridge: NVSwitch)
	Device string `json:"device"` // PCI device id, 2335
}

// Xid is one "NVRM: Xid" line of the kernel log.
type Xid struct {
	// Since is the kernel's timestamp, seconds since boot (dmesg), or -1
	// where the line had none (journalctl's wall-clock form).
	Since float64 `json:"since"`
	Bus   string  `json:"bus,omitempty"` // 0000:8a:00
	Code  int     `json:"code"`
	Text  string  `json:"text"`
}

// DCGM is the result of `dcgmi diag -j`.
type DCGM struct {
	RC     int      `json:"rc"`
	Ran    bool     `json:"ran"`
	Failed []string `json:"failed,omitempty"` // tests with a FAIL result
	Warned []string `json:"warned,omitempty"` // tests with a WARN result
	Text   string   `json:"text,omitempty"`   // what it said when it did not run
}

// section is one section of the script's output.
type section struct {
	out string
	rc  int
	ok  bool // the rc line was seen
}

// ErrNotProbe is returned by Parse for output that is not the probe's.
var ErrNotProbe = errors.New("not the GPU probe's output")

func sections(out []byte) (map[string]*section, error) {
	secs := map[string]*section{}
	var cur *section
	var body strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, marker) {
			if cur != nil {
				body.WriteString(line)
				body.WriteByte('\n')
			}
			continue
		}
		rest := strings.TrimPrefix(line, marker)
		if n, ok := strings.CutPrefix(rest, "rc "); ok && cur != nil {
			rc, err := strconv.Atoi(strings.TrimSpace(n))
			if err != nil {
				return nil, fmt.Errorf("%w: bad status line %q", ErrNotProbe, line)
			}
			cur.out, cur.rc, cur.ok = body.String(), rc, true
			cur = nil
			body.Reset()
			continue
		}
		cur = &section{}
		secs[strings.TrimSpace(rest)] = cur
		body.Reset()
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil { // cut off before its status: keep what came
		cur.out = body.String()
	}
	if len(secs) == 0 {
		return nil, ErrNotProbe
	}
	return secs, nil
}

// Parse reads the output of Script (with DCGMScript's appended, where
// run). A field a GPU reports as "[N/A]", "[Not Supported]" or another
// bracketed word is recorded as not readable, never as a value; a driver
// that answers with an error is recorded in QueryError, and a missing query
// section (output cut off) as QueryRC -1. Parse fails only on output that
// is not the probe's at all (ErrNotProbe).
func Parse(out []byte) (*Probe, error) {
	secs, err := sections(out)
	if err != nil {
		return nil, err
	}
	p := &Probe{}
	q, fields := secs["query"], Fields
	if q == nil { // cut off before it: the driver is not known to answer
		q = &section{rc: -1, out: "the probe's output has no query section"}
	}
	if b := secs["query-base"]; q.rc == 2 && b != nil {
		q, fields = b, baseFields
		for _, f := range Fields {
			if !contains(baseFields, f) {
				p.Unknown = append(p.Unknown, f)
			}
		}
	}
	p.QueryRC = q.rc
	p.parseQuery(q.out, fields)
	if s := secs["q"]; s != nil {
		p.parseQ(s.out)
	}
	if len(p.GPUs) == 0 && len(p.QGPUs) > 0 {
		p.GPUs, p.FromQ = slices.Clone(p.QGPUs), true
	}
	if s := secs["bus"]; s != nil && s.ok && s.rc == 0 {
		p.BusRead = true
		p.Bus = parseBus(s.out)
	}
	if s := secs["fm"]; s != nil {
		p.FabricManager, p.FabricManagerWhy = unitState(s)
	}
	if s := secs["xid"]; s != nil && s.ok && s.rc == 0 {
		p.XidRead = true
		p.Xids = parseXids(s.out)
	}
	if s := secs["boot"]; s != nil && s.rc == 0 {
		p.BootID = strings.TrimSpace(s.out)
	}
	if s := secs["dcgm"]; s != nil {
		p.DCGM = parseDCGM(s)
	}
	return p, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

var lostRE = regexp.MustCompile(`(?i)GPU(?:[0-9]+:)?\s*([0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])`)

func (p *Probe) parseQuery(out string, fields []string) {
	var errs []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		cols := strings.Split(line, ", ")
		if len(cols) != len(fields) {
			if m := lostRE.FindStringSubmatch(line); m != nil {
				p.Lost = append(p.Lost, NormBus(m[1]))
			}
			errs = append(errs, line)
			continue
		}
		g := GPU{Index: len(p.GPUs)}
		for i, f := range fields {
			g.set(f, strings.TrimSpace(cols[i]))
		}
		for _, f := range p.Unknown {
			g.na(f, "not known to this driver")
		}
		p.GPUs = append(p.GPUs, g)
	}
	if len(errs) > 0 {
		p.QueryError = strings.Join(errs, "\n")
	}
}

// notReadable reports whether v is nvidia-smi's way of saying a field has
// no value on this GPU.
func notReadable(v string) bool {
	return v == "" || v == "N/A" || strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]")
}

func (g *GPU) na(field, why string) {
	if g.NA == nil {
		g.NA = map[string]string{}
	}
	g.NA[field] = why
}

func (g *GPU) set(field, v string) {
	if notReadable(v) {
		g.na(field, v)
		return
	}
	num := func() *int64 {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			g.na(field, fmt.Sprintf("unreadable %q", v))
			return nil
		}
		return &n
	}
	yes := func() *bool {
		switch v {
		case "Yes":
			t := true
			return &t
		case "No":
			f := false
			return &f
		}
		g.na(field, fmt.Sprintf("unreadable %q", v))
		return nil
	}
	switch field {
	case "index":
		if n := num(); n != nil {
			g.Index = int(*n)
		}
	case "uuid":
		g.UUID = v
	case "serial":
		g.Serial = v
	case "name":
		g.Name = v
	case "pci.bus_id":
		g.BusID = NormBus(v)
	case "memory.total":
		g.MemoryMiB = num()
	case "driver_version":
		g.Driver = v
	case "ecc.mode.current":
		g.ECCMode = v
	case "ecc.errors.uncorrected.volatile.total":
		g.Uncorrected = num()
	case "retired_pages.pending":
		g.RetiredPend = yes()
	case "remapped_rows.pending":
		g.RemapPending = yes()
	case "remapped_rows.failure":
		g.RemapFailure = yes()
	case "pcie.link.gen.current":
		g.LinkGen = num()
	case "pcie.link.gen.max":
		g.LinkGenMax = num()
	case "pcie.link.width.current":
		g.LinkWidth = num()
	case "pcie.link.width.max":
		g.LinkWidthMax = num()
	case "clocks_throttle_reasons.active":
		n, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(v), "0x"), 16, 64)
		if err != nil {
			g.na(field, fmt.Sprintf("unreadable %q", v))
			return
		}
		g.Throttle = &n
	case "temperature.gpu":
		g.TempC = num()
	}
}

// NormBus normalizes a PCI address to lspci -D's form, lowercase with a
// four-digit domain: nvidia-smi's "00000000:8A:00.0" is "0000:8a:00.0",
// and an address without a domain ("8a:00.0") is in domain 0000.
func NormBus(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	switch strings.Count(s, ":") {
	case 1:
		s = "0000:" + s
	case 2:
		if dom, rest, _ := strings.Cut(s, ":"); len(dom) > 4 {
			s = dom[len(dom)-4:] + ":" + rest
		}
	}
	return s
}

// busRE reads one NVIDIA device of lspci: -n's "0000:18:00.0 0302: 10de:2330
// (rev a1)" or -nn's "0001:00:00.0 3D controller [0302]: NVIDIA Corporation
// GA100 [A100 SXM4 80GB] [10de:20b2] (rev a1)".
var busRE = regexp.MustCompile(`^([0-9a-fA-F]{0,8}:?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?:([0-9a-fA-F]{4}):|.*\[([0-9a-fA-F]{4})\]:)\s.*?\b10de:([0-9a-fA-F]{4})\b`)

// parseBus reads the NVIDIA devices of lspci -n or -nn (with or without
// -D) and of the probe's sysfs lines, which have -n's form.
func parseBus(out string) []Device {
	var ds []Device
	for _, line := range strings.Split(out, "\n") {
		m := busRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		ds = append(ds, Device{Addr: NormBus(m[1]), Class: strings.ToLower(m[2] + m[3]), Device: strings.ToLower(m[4])})
	}
	return ds
}

// GPUsOnBus are the bus's display and 3D controllers (class 03xx).
func (p *Probe) GPUsOnBus() []Device {
	var ds []Device
	for _, d := range p.Bus {
		if strings.HasPrefix(d.Class, "03") {
			ds = append(ds, d)
		}
	}
	return ds
}

// NVSwitches are the NVSwitch bridges on the bus (class 0680).
func (p *Probe) NVSwitches() int {
	n := 0
	for _, d := range p.Bus {
		if d.Class == "0680" {
			n++
		}
	}
	return n
}

var xidRE = regexp.MustCompile(`^(?:\[\s*([0-9]+\.[0-9]+)\]\s*)?.*NVRM: Xid \((?:PCI:)?([0-9a-fA-F:]+)\): ([0-9]+),\s*(.*)$`)

func parseXids(out string) []Xid {
	var xs []Xid
	for _, line := range strings.Split(out, "\n") {
		m := xidRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		code, err := strconv.Atoi(m[3])
		if err != nil {
			continue
		}
		since := -1.0
		if m[1] != "" {
			since, _ = strconv.ParseFloat(m[1], 64)
		}
		xs = append(xs, Xid{Since: since, Bus: strings.ToLower(m[2]), Code: code, Text: strings.TrimSpace(m[4])})
	}
	return xs
}

// parseDCGM reads `dcgmi diag -j`: DCGM's JSON ("DCGM GPU Diagnostic" >
// test_categories > tests > results, each result with a status of PASS,
// FAIL, WARN or SKIPPED, in any case). A test with a FAIL result is
// failed; one with a WARN result is listed in Warned.
func parseDCGM(s *section) *DCGM {
	d := &DCGM{RC: s.rc}
	if s.rc == 127 {
		d.Text = strings.TrimSpace(s.out)
		return d
	}
	out := s.out
	if i := strings.IndexByte(out, '{'); i > 0 { // a warning line before the JSON
		out = out[i:]
	}
	var doc any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		d.Text = firstLine(s.out)
		return d
	}
	var walk func(v any, name string)
	walk = func(v any, name string) {
		switch t := v.(type) {
		case map[string]any:
			n := name
			if tn, ok := t["name"].(string); ok {
				n = tn
			}
			for k, c := range t {
				if k != "status" {
					walk(c, n)
					continue
				}
				r, _ := c.(string)
				d.Ran = true
				switch strings.ToLower(r) {
				case "fail", "failed":
					if !slices.Contains(d.Failed, n) {
						d.Failed = append(d.Failed, n)
					}
				case "warn", "warning":
					if !slices.Contains(d.Warned, n) {
						d.Warned = append(d.Warned, n)
					}
				}
			}
		case []any:
			for _, c := range t {
				walk(c, name)
			}
		}
	}
	walk(doc, "")
	slices.Sort(d.Failed)
	slices.Sort(d.Warned)
	if !d.Ran {
		d.Text = firstLine(s.out)
	}
	return d
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// unitStates are the answers of systemctl is-active.
var unitStates = []string{"active", "reloading", "inactive", "failed", "activating", "deactivating", "maintenance", "refreshing"}

// unitState reads a systemctl is-active section: the state, or "" and
// what it printed instead (no systemd, no systemctl).
func unitState(s *section) (state, why string) {
	for _, line := range strings.Split(strings.TrimSpace(s.out), "\n") {
		if contains(unitStates, strings.TrimSpace(line)) {
			return strings.TrimSpace(line), ""
		}
	}
	why = firstLine(s.out)
	if why == "" {
		why = fmt.Sprintf("systemctl exited %d", s.rc)
	}
	return "", why
}
