package gcp_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// violation is one way a request breaks the discovery document or a rule
// the vendor documents. Path names the field as Compute Engine's own
// errors do ("resource.scheduling.onHostMaintenance").
type violation struct {
	Path, Problem string
}

func (v violation) String() string { return v.Path + ": " + v.Problem }

// sameBody maps a method to the one whose body rules it shares: both take
// the same resource (firewalls.update replaces a rule with a Firewall, as
// firewalls.insert makes one).
var sameBody = map[string]string{"compute.firewalls.update": "compute.firewalls.insert"}

// checkRequest checks one request of method m: its query parameters
// against the method's parameters, its body against the request schema
// (every field known, of the schema's JSON type and format, enums, patterns,
// fields the method requires, no output-only or deprecated field), then
// against the rules the vendor documents in prose (bodyRules).
func (d *discoveryDoc) checkRequest(m *discoveryMethod, query url.Values, body []byte) []violation {
	var out []violation
	for name, vals := range query {
		p := m.Parameters[name]
		if p == nil {
			// A system parameter; the REST clients spell alt "$alt".
			p = d.Parameters[strings.TrimPrefix(name, "$")]
		}
		if p == nil || p.Location != "query" {
			out = append(out, violation{"?" + name, "not a query parameter of " + m.ID})
			continue
		}
		for _, v := range vals {
			out = append(out, d.walk(m.ID, v, p, "?"+name)...)
		}
	}
	if p := m.Parameters["requestId"]; p != nil && query.Has("requestId") {
		// "The request ID must be a valid UUID with the exception that zero
		// UUID is not supported" (the parameter's description).
		if u, err := uuid.Parse(query.Get("requestId")); err != nil || u == uuid.Nil {
			out = append(out, violation{"?requestId", fmt.Sprintf("%q is not a non-zero UUID", query.Get("requestId"))})
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return append(out, violation{"resource", "not JSON: " + err.Error()})
	}
	out = append(out, d.walk(m.ID, v, m.Request, "resource")...)
	if obj, ok := v.(map[string]any); ok {
		for _, r := range bodyRules {
			if r.Method == m.ID || sameBody[m.ID] == r.Method {
				for _, p := range r.Check(obj) {
					out = append(out, violation{p.Path, p.Problem + " (" + r.Name + ": " + r.Source + ")"})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// checkResponse checks an answer of method m (one of discoveryReads, as
// the test mock gives it) against the method's response schema: every
// field known, of the schema's JSON type and format, enums and patterns.
// Output-only fields are what an answer holds, so they pass.
func (d *discoveryDoc) checkResponse(m *discoveryMethod, body []byte) []violation {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []violation{{"response", "not JSON: " + err.Error()}}
	}
	out := d.walk(responseOf+m.ID, v, m.Response, "response")
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// responseOf prefixes the method walk is given for a response.
const responseOf = "response of "

// walk checks v against s at path; method is the request's method, or
// responseOf and the method for an answer.
func (d *discoveryDoc) walk(method string, v any, s *jsonSchema, path string) []violation {
	var out []violation
	bad := func(format string, args ...any) { out = append(out, violation{path, fmt.Sprintf(format, args...)}) }
	reading := strings.HasPrefix(method, responseOf)
	// Field-level marks live on the property, before any $ref.
	if !reading && (s.ReadOnly || strings.HasPrefix(s.Description, "[Output Only]")) {
		bad("output only; a request does not set it")
	}
	if !reading && s.Deprecated {
		bad("deprecated")
	}
	if s.Ref != "" {
		r := d.Schemas[s.Ref]
		if r == nil {
			bad("schema %s is not in %s", s.Ref, discoveryCopy)
			return out
		}
		s = r
	}
	switch s.Type {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			bad("want an object, got %s", jsonKind(v))
			return out
		}
		for _, k := range sortedKeys(obj) {
			switch p := s.Properties[k]; {
			case p != nil:
				out = append(out, d.walk(method, obj[k], p, path+"."+k)...)
			case s.AdditionalProperties != nil:
				out = append(out, d.walk(method, obj[k], s.AdditionalProperties, path+"."+k)...)
			default:
				out = append(out, violation{path + "." + k, "unknown field"})
			}
		}
		for _, k := range sortedKeys(s.Properties) {
			if _, ok := obj[k]; !ok && slices.Contains(s.Properties[k].Annotations.Required, method) {
				out = append(out, violation{path + "." + k, "required by " + method})
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			bad("want an array, got %s", jsonKind(v))
			return out
		}
		item := s.Items
		if item != nil && s.Pattern != "" && item.Pattern == "" {
			// Tags.items carries its items' pattern on the array.
			cp := *item
			cp.Pattern = s.Pattern
			item = &cp
		}
		for i, e := range arr {
			if item != nil {
				out = append(out, d.walk(method, e, item, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			bad("want a string, got %s", jsonKind(v))
			return out
		}
		switch s.Format {
		case "int64":
			if _, err := strconv.ParseInt(str, 10, 64); err != nil {
				bad("%q is not an int64", str)
			}
		case "uint64":
			if _, err := strconv.ParseUint(str, 10, 64); err != nil {
				bad("%q is not a uint64", str)
			}
		case "byte":
			if _, err := base64.StdEncoding.DecodeString(str); err != nil {
				if _, err := base64.URLEncoding.DecodeString(str); err != nil {
					bad("not base64")
				}
			}
		}
		if len(s.Enum) > 0 && !slices.Contains(s.Enum, str) {
			bad("%q is not one of %v", str, s.Enum)
		}
		if s.Pattern != "" && !regexp.MustCompile(`^(?:`+s.Pattern+`)$`).MatchString(str) {
			bad("%q does not match %s", str, s.Pattern)
		}
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			bad("want an integer, got %s", jsonKind(v))
			return out
		}
		bits, signed := 64, true
		switch s.Format {
		case "int32":
			bits = 32
		case "uint32":
			bits, signed = 32, false
		}
		var err error
		if signed {
			_, err = strconv.ParseInt(n.String(), 10, bits)
		} else {
			_, err = strconv.ParseUint(n.String(), 10, bits)
		}
		if err != nil {
			bad("%s is not a %s", n, s.Format)
		}
	case "number":
		if _, ok := v.(json.Number); !ok {
			bad("want a number, got %s", jsonKind(v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("want a boolean, got %s", jsonKind(v))
		}
	case "any", "":
	default:
		bad("schema type %q unknown to the check", s.Type)
	}
	return out
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// bodyRule is a rule the vendor states in prose, which a schema cannot
// carry. Source cites where.
type bodyRule struct {
	Method, Name, Source string
	Check                func(body map[string]any) []violation
}

// Sources of the rules, read 2026-12-01 through the search tool's stored
// copies (docs.cloud.google.com mirrors cloud.google.com).
const (
	srcDiscovery   = "compute v1 discovery document (google.golang.org/api compute/v1/compute-api.json)"
	srcHostMaint   = "https://cloud.google.com/compute/docs/instances/setting-vm-host-options#limitations"
	srcAccelerated = "https://cloud.google.com/compute/docs/accelerator-optimized-machines"
	srcLabels      = "https://cloud.google.com/compute/docs/labeling-resources#requirements"
	srcPlacement   = "https://cloud.google.com/compute/docs/instances/placement-policies-overview#restrictions"
	srcCompact     = "https://cloud.google.com/compute/docs/instances/use-compact-placement-policies"
	srcCompactMT   = "https://cloud.google.com/ai-hypercomputer/docs/placement-policy-and-workload-policy"
	srcConsume     = "https://cloud.google.com/compute/docs/instances/reservations-consume"
	srcFlexCreate  = "https://cloud.google.com/compute/docs/instances/create-flex-start-vm"
	srcFlexAbout   = "https://cloud.google.com/compute/docs/instances/about-flex-start-vms"
)

// flexStartSeries are the GPU machine series that run as Flex-start VMs:
// "all accelerator-optimized machine types (except A4X and G4)"
// (srcFlexAbout), of the accelerator-optimized family (srcAccelerated).
var flexStartSeries = []string{"a4", "a3", "a2", "g2"}

// acceleratorSeries are the machine series whose machine types come with
// GPUs attached (A4X, A4, A3, A2, G4, G2: the accelerator-optimized
// family, srcAccelerated).
var acceleratorSeries = []string{"a4x", "a4", "a3", "a2", "g4", "g2"}

// compactPlacementSeries are the GPU machine series a compact placement
// policy takes: "A4X Max, A4X, A4, A3 Ultra, A3 Mega, A3 High, A3 Edge, A2,
// G4, G2" (srcCompactMT, "Supported machine types"); N1 is not among them.
var compactPlacementSeries = []string{"a4x", "a4", "a3", "a2", "g4", "g2"}

// resourcePolicyPathRE is a regional resource policy as an instance names
// it: a path or a URL.
var resourcePolicyPathRE = regexp.MustCompile(`^(?:https://[^/]+/compute/v1/)?projects/[^/]+/regions/([a-z0-9-]+)/resourcePolicies/[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$`)

// machineSeries is the series of an instance body's machine type
// ("zones/Z/machineTypes/g2-standard-4" → "g2"), and zoneOf its zone.
func machineSeries(b map[string]any) string {
	mt := str(b, "machineType")
	return strings.SplitN(mt[strings.LastIndexByte(mt, '/')+1:], "-", 2)[0]
}

func zoneOf(b map[string]any) string {
	parts := strings.Split(str(b, "machineType"), "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "zones" {
			return parts[i+1]
		}
	}
	return ""
}

// Label rules (srcLabels): "Keys have a minimum length of 1 character and a
// maximum length of 63 characters, and cannot be empty. Values can be empty,
// and have a maximum length of 63 characters. Keys and values can contain
// only lowercase letters, numeric characters, underscores, and dashes. All
// characters must use UTF-8 encoding, and international characters are
// allowed. Keys must start with a lowercase letter or international
// character." Each resource takes up to 64 labels. Google's APIs write the
// same rules as regular expressions (for example the Backup and DR API's
// KeyValuePair, docs.cloud.google.com/python/docs/reference/backupdr/latest):
// keys [\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}, values
// [\p{Ll}\p{Lo}\p{N}_-]{0,63}; lengths count characters, not bytes.
var (
	labelKeyRE   = regexp.MustCompile(`^[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}$`)
	labelValueRE = regexp.MustCompile(`^[\p{Ll}\p{Lo}\p{N}_-]{0,63}$`)
)

const maxLabels = 64

// ipProtocols are the firewall's well-known protocol names: "one of the
// following well known protocol strings (tcp, udp, icmp, esp, ah, ipip,
// sctp) or the IP protocol number" (Firewall.allowed[].IPProtocol).
var ipProtocols = []string{"tcp", "udp", "icmp", "esp", "ah", "ipip", "sctp"}

var portSpecRE = regexp.MustCompile(`^(\d+)(?:-(\d+))?$`)

// reservationNameRE is a reservation named in a reservationAffinity: its
// name (RFC 1035, as every resource name) or projects/P/reservations/N for
// a shared one (ReservationAffinity.values).
var reservationNameRE = regexp.MustCompile(`^(?:projects/[a-z][-a-z0-9]*[a-z0-9]/reservations/)?[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$`)

var bodyRules = []bodyRule{
	{"compute.instances.insert", "a reservation is targeted by name, with its key", srcDiscovery + ` ReservationAffinity ("To target a ` +
		`SPECIFIC_RESERVATION by name, specify googleapis.com/reservation-name as the key and specify the name of your reservation as ` +
		`its value"); ` + srcConsume + ` ("key": "compute.googleapis.com/reservation-name", "values": ["RESERVATION_NAME"])`,
		func(b map[string]any) []violation {
			ra := sub(b, "reservationAffinity")
			if ra == nil {
				return nil
			}
			vals := list(ra, "values")
			switch t := str(ra, "consumeReservationType"); {
			case t == "SPECIFIC_RESERVATION":
				var out []violation
				if k := str(ra, "key"); k != "compute.googleapis.com/reservation-name" {
					out = append(out, violation{"resource.reservationAffinity.key", fmt.Sprintf("%q is not the reservation-name key", k)})
				}
				if len(vals) != 1 {
					return append(out, violation{"resource.reservationAffinity.values", fmt.Sprintf("%d values, want the one reservation", len(vals))})
				}
				if v, _ := vals[0].(string); !reservationNameRE.MatchString(v) {
					out = append(out, violation{"resource.reservationAffinity.values[0]", fmt.Sprintf("%q is no reservation name", v)})
				}
				return out
			case str(ra, "key") != "" || len(vals) > 0:
				return []violation{{"resource.reservationAffinity", t + " names no reservation"}}
			}
			return nil
		}},
	{"compute.instances.insert", "a Spot VM consumes no reservation", srcConsume + ` (Limitations: "You can't consume a reservation to create ` +
		`the following Compute Engine resources: Spot VMs or preemptible instances")`,
		func(b map[string]any) []violation {
			if str(sub(b, "scheduling"), "provisioningModel") == "SPOT" &&
				str(sub(b, "reservationAffinity"), "consumeReservationType") == "SPECIFIC_RESERVATION" {
				return []violation{{"resource.reservationAffinity", "a Spot VM targets a reservation"}}
			}
			return nil
		}},
	{"compute.instances.insert", "a Flex-start VM", srcFlexCreate + ` (REST: reservationAffinity NO_RESERVATION; scheduling.maxRunDuration ` +
		`"must be between 10 minutes and seven days"; requestValidForDuration "between 90 seconds (90) and two hours (7200)", or 0; ` +
		`instanceTerminationAction STOP or DELETE; onHostMaintenance TERMINATE); ` + srcFlexAbout + ` (supported machine types); ` +
		srcDiscovery + ` InstanceParams.requestValidForDuration`,
		func(b map[string]any) []violation {
			s := sub(b, "scheduling")
			if str(s, "provisioningModel") != "FLEX_START" {
				if sub(b, "params")["requestValidForDuration"] != nil || s["maxRunDuration"] != nil {
					return []violation{{"resource.scheduling", "a queue deadline or run duration on a VM that is not Flex-start"}}
				}
				return nil
			}
			var out []violation
			if ms := machineSeries(b); !slices.Contains(flexStartSeries, ms) || len(list(b, "guestAccelerators")) > 0 {
				out = append(out, violation{"resource.machineType", fmt.Sprintf("series %s runs no Flex-start VM (only %v)", ms, flexStartSeries)})
			}
			secs := func(path string, d map[string]any) (int64, bool) {
				v, err := strconv.ParseInt(str(d, "seconds"), 10, 64)
				if err != nil {
					out = append(out, violation{path + ".seconds", fmt.Sprintf("%v is no count of seconds", d["seconds"])})
				}
				return v, err == nil
			}
			if mrd := sub(s, "maxRunDuration"); mrd == nil {
				out = append(out, violation{"resource.scheduling.maxRunDuration", "missing on a Flex-start VM"})
			} else if v, ok := secs("resource.scheduling.maxRunDuration", mrd); ok && (v < 600 || v > 7*24*3600) {
				out = append(out, violation{"resource.scheduling.maxRunDuration.seconds", fmt.Sprintf("%d is not between 10 minutes and 7 days", v)})
			}
			if rv := sub(sub(b, "params"), "requestValidForDuration"); rv != nil {
				if v, ok := secs("resource.params.requestValidForDuration", rv); ok && v != 0 && (v < 90 || v > 7200) {
					out = append(out, violation{"resource.params.requestValidForDuration.seconds", fmt.Sprintf("%d is neither 0 nor between 90 and 7200", v)})
				}
			}
			if a := str(s, "instanceTerminationAction"); a != "STOP" && a != "DELETE" {
				out = append(out, violation{"resource.scheduling.instanceTerminationAction", fmt.Sprintf("%q, want STOP or DELETE", a)})
			}
			if t := str(sub(b, "reservationAffinity"), "consumeReservationType"); t != "NO_RESERVATION" {
				out = append(out, violation{"resource.reservationAffinity.consumeReservationType", fmt.Sprintf("%q on a Flex-start VM, want NO_RESERVATION", t)})
			}
			if s["preemptible"] == true {
				out = append(out, violation{"resource.scheduling.preemptible", "set on a Flex-start VM"})
			}
			return out
		}},
	{"compute.instances.insert", "machine type given", srcDiscovery + ` Instance.machineType: "This is provided by the client when the instance is created."`,
		func(b map[string]any) []violation {
			if str(b, "machineType") == "" {
				return []violation{{"resource.machineType", "missing"}}
			}
			return nil
		}},
	{"compute.instances.insert", "one boot disk from an image", srcDiscovery + ` AttachedDisk.boot ("Indicates that this is a boot disk"), ` +
		`AttachedDiskInitializeParams.diskSizeGb ("If you specify a sourceImage, which is required for boot disks"; "The size must be at least 10 GB")`,
		func(b map[string]any) []violation {
			var out []violation
			disks := list(b, "disks")
			boots := 0
			for i, d := range disks {
				dm, _ := d.(map[string]any)
				path := fmt.Sprintf("resource.disks[%d]", i)
				ip, _ := dm["initializeParams"].(map[string]any)
				if n, ok := ip["diskSizeGb"].(string); ok {
					if gb, err := strconv.ParseInt(n, 10, 64); err == nil && gb < 10 {
						out = append(out, violation{path + ".initializeParams.diskSizeGb", n + " is below 10 GB"})
					}
				}
				if dm["boot"] != true {
					continue
				}
				boots++
				if str(dm, "source") == "" && str(ip, "sourceImage") == "" {
					out = append(out, violation{path, "a boot disk needs initializeParams.sourceImage (or an existing source disk)"})
				}
			}
			if boots != 1 {
				out = append(out, violation{"resource.disks", fmt.Sprintf("%d boot disks, want exactly one", boots)})
			}
			return out
		}},
	{"compute.instances.insert", "a network interface", srcDiscovery + ` Instance.networkInterfaces ("how interfaces are configured to interact with other network services, such as connecting to the internet")`,
		func(b map[string]any) []violation {
			if len(list(b, "networkInterfaces")) == 0 {
				return []violation{{"resource.networkInterfaces", "missing: the VM would have no network"}}
			}
			return nil
		}},
	{"compute.instances.insert", "GPUs terminate on host maintenance", srcHostMaint + `: "The following instances can only stop during host maintenance events: ... VMs with GPUs or TPUs attached"; ` + srcAccelerated,
		func(b map[string]any) []violation {
			gpus := len(list(b, "guestAccelerators")) > 0 || slices.Contains(acceleratorSeries, machineSeries(b))
			if ohm := str(sub(b, "scheduling"), "onHostMaintenance"); gpus && ohm != "TERMINATE" {
				return []violation{{"resource.scheduling.onHostMaintenance", fmt.Sprintf("%q with GPUs attached, want TERMINATE", ohm)}}
			}
			return nil
		}},
	{"compute.instances.insert", "Spot VMs stop on maintenance and do not restart", srcDiscovery + ` Scheduling.onHostMaintenance ("For preemptible instances, the default and only possible behavior is TERMINATE"), ` +
		`Scheduling.automaticRestart ("Preemptible instances cannot be automatically restarted"); ` + srcHostMaint + `: "Spot VMs and preemptible VMs can't automatically restart"`,
		func(b map[string]any) []violation {
			s := sub(b, "scheduling")
			if str(s, "provisioningModel") != "SPOT" && s["preemptible"] != true {
				return nil
			}
			var out []violation
			if ohm, ok := s["onHostMaintenance"]; ok && ohm != "TERMINATE" {
				out = append(out, violation{"resource.scheduling.onHostMaintenance", fmt.Sprintf("%v on a Spot VM, want TERMINATE", ohm)})
			}
			if s["automaticRestart"] != false {
				out = append(out, violation{"resource.scheduling.automaticRestart", "a Spot VM must set it false (the API's default is true)"})
			}
			return out
		}},
	{"compute.instances.insert", "labels", srcLabels, func(b map[string]any) []violation {
		out := checkLabels("resource.labels", b["labels"])
		for i, d := range list(b, "disks") {
			dm, _ := d.(map[string]any)
			out = append(out, checkLabels(fmt.Sprintf("resource.disks[%d].initializeParams.labels", i), sub(dm, "initializeParams")["labels"])...)
		}
		return out
	}},
	{"compute.instances.insert", "metadata size", srcDiscovery + ` Metadata.items ("The total size of all keys and values must be less than 512 KB"), ` +
		`Metadata.items[].value ("their size must be less than or equal to 262144 bytes (256 KiB)")`,
		func(b map[string]any) []violation {
			var out []violation
			total := 0
			for i, it := range list(sub(b, "metadata"), "items") {
				im, _ := it.(map[string]any)
				k, v := str(im, "key"), str(im, "value")
				total += len(k) + len(v)
				if len(v) > 262144 {
					out = append(out, violation{fmt.Sprintf("resource.metadata.items[%d].value", i), fmt.Sprintf("%d bytes, over 256 KiB", len(v))})
				}
			}
			if total >= 512*1024 {
				out = append(out, violation{"resource.metadata.items", fmt.Sprintf("%d bytes in all, not under 512 KB", total)})
			}
			return out
		}},
	{"compute.instances.insert", "resource policies of the instance's region", srcPlacement + `: "Placement policies are regional resources, and they restrict their use to the region where they are located"`,
		func(b map[string]any) []violation {
			var out []violation
			zone := zoneOf(b)
			for i, rp := range list(b, "resourcePolicies") {
				path := fmt.Sprintf("resource.resourcePolicies[%d]", i)
				s, _ := rp.(string)
				m := resourcePolicyPathRE.FindStringSubmatch(s)
				switch {
				case m == nil:
					out = append(out, violation{path, fmt.Sprintf("%q is not projects/P/regions/R/resourcePolicies/NAME", s)})
				case zone == "" || !strings.HasPrefix(zone, m[1]+"-"):
					out = append(out, violation{path, fmt.Sprintf("policy of region %s on an instance in zone %q", m[1], zone)})
				}
			}
			return out
		}},
	{"compute.instances.insert", "compact placement: TERMINATE and a supported series", srcPlacement + ` (compact policies take only instances that stop on host maintenance); ` +
		srcCompactMT + ` ("Supported machine types"); the adapter attaches only compact placement policies`,
		func(b map[string]any) []violation {
			if len(list(b, "resourcePolicies")) == 0 {
				return nil
			}
			var out []violation
			if ohm := str(sub(b, "scheduling"), "onHostMaintenance"); ohm != "TERMINATE" {
				out = append(out, violation{"resource.scheduling.onHostMaintenance", fmt.Sprintf("%q with a compact placement policy, want TERMINATE", ohm)})
			}
			if s := machineSeries(b); !slices.Contains(compactPlacementSeries, s) {
				out = append(out, violation{"resource.machineType", fmt.Sprintf("series %s takes no compact placement policy (only %v)", s, compactPlacementSeries)})
			}
			return out
		}},
	{"compute.resourcePolicies.insert", "a compact placement policy", srcCompact + ` (a compact policy is a group placement policy with collocation COLLOCATED); ` +
		srcDiscovery + ` ResourcePolicyGroupPlacementPolicy.vmCount ("Google does not recommend that you use this field unless ... you want your policy to work only if it contains this exact number of VMs")`,
		func(b map[string]any) []violation {
			g := sub(b, "groupPlacementPolicy")
			var out []violation
			if str(g, "collocation") != "COLLOCATED" {
				out = append(out, violation{"resource.groupPlacementPolicy.collocation", fmt.Sprintf("%q, want COLLOCATED", str(g, "collocation"))})
			}
			for _, k := range []string{"vmCount", "availabilityDomainCount"} {
				if _, ok := g[k]; ok {
					out = append(out, violation{"resource.groupPlacementPolicy." + k, "set: the cluster's size is not fixed (vmCount) and a spread count is no compact policy"})
				}
			}
			return out
		}},
	{"compute.firewalls.insert", "allowed protocols and ports", srcDiscovery + ` Firewall.allowed[].IPProtocol ("The protocol type is required when creating a firewall rule"; ` +
		`"one of the following well known protocol strings (tcp, udp, icmp, esp, ah, ipip, sctp) or the IP protocol number"), ` +
		`Firewall.allowed[].ports ("only applicable for the UDP or TCP protocol. Each entry must be either an integer or a range")`,
		func(b map[string]any) []violation {
			var out []violation
			for i, a := range list(b, "allowed") {
				am, _ := a.(map[string]any)
				path := fmt.Sprintf("resource.allowed[%d]", i)
				p := str(am, "IPProtocol")
				n, err := strconv.Atoi(p)
				switch {
				case p == "":
					out = append(out, violation{path + ".IPProtocol", "missing"})
				case err == nil && (n < 0 || n > 255):
					out = append(out, violation{path + ".IPProtocol", p + " is not an IP protocol number"})
				case err != nil && !slices.Contains(ipProtocols, p):
					out = append(out, violation{path + ".IPProtocol", fmt.Sprintf("%q is not one of %v or a number", p, ipProtocols)})
				}
				ports := list(am, "ports")
				if len(ports) > 0 && p != "tcp" && p != "udp" && p != "6" && p != "17" {
					out = append(out, violation{path + ".ports", "ports apply only to tcp and udp, not " + p})
				}
				for j, pt := range ports {
					if s, _ := pt.(string); !validPortSpec(s) {
						out = append(out, violation{fmt.Sprintf("%s.ports[%d]", path, j), fmt.Sprintf("%q is not a port or a range lo-hi of ports", s)})
					}
				}
			}
			if len(list(b, "allowed")) == 0 && len(list(b, "denied")) == 0 {
				out = append(out, violation{"resource.allowed", "neither allowed nor denied: the rule does nothing"})
			}
			return out
		}},
	{"compute.firewalls.insert", "source ranges and tags", srcDiscovery + ` Firewall.sourceRanges ("These ranges must be expressed in CIDR format"), ` +
		`Tags.items ("Each tag must be 1-63 characters long, and comply with RFC1035"; a rule's targetTags and sourceTags name instance tags)`,
		func(b map[string]any) []violation {
			var out []violation
			for i, r := range list(b, "sourceRanges") {
				if s, _ := r.(string); !validCIDR(s) {
					out = append(out, violation{fmt.Sprintf("resource.sourceRanges[%d]", i), fmt.Sprintf("%q is not in CIDR format", s)})
				}
			}
			tagRE := regexp.MustCompile(`^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$`)
			for _, field := range []string{"targetTags", "sourceTags"} {
				for i, tg := range list(b, field) {
					if s, _ := tg.(string); !tagRE.MatchString(s) {
						out = append(out, violation{fmt.Sprintf("resource.%s[%d]", field, i), fmt.Sprintf("%q is not an RFC1035 tag", s)})
					}
				}
			}
			// "One or both of sourceRanges and sourceTags may be set"
			// (Firewall.sourceRanges, sourceTags); an INGRESS rule with
			// neither is not one gpuprov means to send.
			if str(b, "direction") != "EGRESS" && len(list(b, "sourceRanges")) == 0 && len(list(b, "sourceTags")) == 0 {
				out = append(out, violation{"resource.sourceRanges", "an INGRESS rule with neither sourceRanges nor sourceTags"})
			}
			if str(b, "direction") == "EGRESS" && len(list(b, "sourceTags")) > 0 {
				out = append(out, violation{"resource.sourceTags", "EGRESS rules cannot name sourceTags (Firewall.direction)"})
			}
			return out
		}},
}

// checkLabels applies the label rules to a labels map at path.
func checkLabels(path string, v any) []violation {
	m, _ := v.(map[string]any)
	var out []violation
	if len(m) > maxLabels {
		out = append(out, violation{path, fmt.Sprintf("%d labels, at most %d", len(m), maxLabels)})
	}
	for _, k := range sortedKeys(m) {
		val, _ := m[k].(string)
		if !labelKeyRE.MatchString(k) {
			out = append(out, violation{path + "." + k, fmt.Sprintf("key %q (%d characters): want 1-63 lowercase letters, digits, _ or -, starting with a lowercase or international letter", k, utf8.RuneCountInString(k))})
		}
		if !labelValueRE.MatchString(val) {
			out = append(out, violation{path + "." + k, fmt.Sprintf("value %q (%d characters): want 0-63 lowercase letters, digits, _ or -", val, utf8.RuneCountInString(val))})
		}
	}
	return out
}

func validPortSpec(s string) bool {
	m := portSpecRE.FindStringSubmatch(s)
	if m == nil {
		return false
	}
	lo, err := strconv.Atoi(m[1])
	if err != nil || lo > math.MaxUint16 {
		return false
	}
	if m[2] == "" {
		return true
	}
	hi, err := strconv.Atoi(m[2])
	return err == nil && hi <= math.MaxUint16 && lo <= hi
}

func validCIDR(s string) bool {
	_, err := netip.ParsePrefix(s)
	return err == nil
}

// Small readers of a decoded body; a missing or mistyped field reads as
// zero, which the schema walk reports on its own.
func sub(m map[string]any, k string) map[string]any { v, _ := m[k].(map[string]any); return v }
func list(m map[string]any, k string) []any         { v, _ := m[k].([]any); return v }
func str(m map[string]any, k string) string         { v, _ := m[k].(string); return v }
