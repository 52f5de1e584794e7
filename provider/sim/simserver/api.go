package simserver

import (
	"bytes"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// handler serves one cloud API call. It runs with s.mu held, after the
// call's faults and latency, and returns the status and body to answer
// with, or an error response.
type handler func(c *cloud, r *http.Request, body []byte, now time.Time) (int, any, *apiError)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	const p = "/clouds/{cloud}/v1/"
	mux.Handle("GET "+p+"offers", s.api("list_offers", s.listOffers))
	mux.Handle("POST "+p+"instances", s.api("create_instance", s.createInstance))
	mux.Handle("GET "+p+"instances", s.api("list_instances", s.listInstances))
	mux.Handle("GET "+p+"instances/{id}", s.api("get_instance", s.getInstance))
	mux.Handle("DELETE "+p+"instances/{id}", s.api("delete_instance", s.deleteInstance))
	mux.Handle("PUT "+p+"firewalls/{name}", s.api("put_firewall", s.putFirewall))
	mux.Handle("DELETE "+p+"firewalls/{name}", s.api("delete_firewall", s.deleteFirewall))
	mux.Handle("GET "+p+"firewalls", s.api("list_firewalls", s.listFirewalls))
	mux.Handle("PUT "+p+"ssh-keys/{name}", s.api("put_ssh_key", s.putSSHKey))
	mux.Handle("DELETE "+p+"ssh-keys/{name}", s.api("delete_ssh_key", s.deleteSSHKey))
	mux.Handle("GET "+p+"ssh-keys", s.api("list_ssh_keys", s.listSSHKeys))
	mux.Handle("PUT "+p+"placement-groups/{name}", s.api("put_placement_group", s.putPlacementGroup))
	mux.Handle("DELETE "+p+"placement-groups/{name}", s.api("delete_placement_group", s.deletePlacementGroup))
	mux.Handle("GET "+p+"placement-groups", s.api("list_placement_groups", s.listPlacementGroups))
	mux.Handle("POST "+p+"volumes", s.api("create_volume", s.createVolume))
	mux.Handle("GET "+p+"volumes", s.api("list_volumes", s.listVolumes))
	mux.Handle("GET "+p+"volumes/{id}", s.api("get_volume", s.getVolume))
	mux.Handle("POST "+p+"volumes/{id}/attach", s.api("attach_volume", s.attachVolume))
	mux.Handle("POST "+p+"volumes/{id}/detach", s.api("detach_volume", s.detachVolume))
	mux.Handle("DELETE "+p+"volumes/{id}", s.api("delete_volume", s.deleteVolume))
	mux.Handle("GET "+p+"reservations", s.api("list_reservations", s.listReservations))
	mux.Handle("GET "+p+"quotas", s.api("list_quotas", s.listQuotas))
	mux.Handle("GET "+p+"block-offerings", s.api("list_block_offerings", s.listBlockOfferings))
	mux.Handle("POST "+p+"block-purchases", s.api("purchase_block", s.purchaseBlock))
	s.adminRoutes(mux)
	s.metadataRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, CodeNotFound, "no route for %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// api wraps h with what every call goes through: cloud lookup, bearer
// authentication, the token bucket, injected faults, latency, stats.
func (s *Server) api(kind string, h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			return // the client went away while sending
		}
		s.mu.Lock()
		c := s.clouds[r.PathValue("cloud")]
		if c == nil {
			s.unlock()
			writeError(w, errorf(http.StatusNotFound, CodeNotFound, "no cloud %q", r.PathValue("cloud")))
			return
		}
		c.stats.Calls[kind]++
		var aerr *apiError
		hold := false
		if !bearer(r, c.apiKey) {
			aerr = errorf(http.StatusUnauthorized, CodeUnauthorized, "missing or invalid API key")
		} else {
			hold, aerr = c.gate(kind, s.clock.Now())
		}
		if aerr != nil {
			c.stats.Errors[aerr.code]++
		}
		latency, holdFor := c.cfg.Timing.APILatency.Std(), orDefault(c.faults.TimeoutHold, time.Minute)
		s.unlock()
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		if hold {
			s.sleep(r.Context(), holdFor)
			writeError(w, errorf(http.StatusGatewayTimeout, CodeTimeout, "request timed out"))
			return
		}
		if !s.sleep(r.Context(), latency) && r.Context().Err() != nil {
			return // the client gave up; nobody reads the answer
		}
		var (
			status int
			resp   any
		)
		s.mu.Lock()
		if s.closed {
			aerr = errorf(http.StatusServiceUnavailable, CodeUnavailable, "server shutting down")
		} else {
			status, resp, aerr = h(c, r, body, s.clock.Now())
		}
		if aerr != nil {
			c.stats.Errors[aerr.code]++
		}
		s.unlock()
		switch {
		case aerr != nil && aerr.drop:
			panic(http.ErrAbortHandler) // closes the connection without an answer
		case aerr != nil:
			writeError(w, aerr)
		default:
			writeJSON(w, status, resp)
		}
	})
}

func bearer(r *http.Request, key string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && key != "" && subtle.ConstantTimeCompare([]byte(got), []byte(key)) == 1
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	if v == nil {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a client that went away gets nothing either way
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterSeconds(e.retryAfter))
	}
	var b errorBody
	b.Error.Code, b.Error.Message = e.code, e.message
	writeJSON(w, e.status, b)
}

// decode decodes a JSON body strictly: unknown fields are an invalid_request.
func decode(body []byte, into any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return errorf(http.StatusBadRequest, CodeInvalidRequest, "malformed JSON body: %v", err)
	}
	return nil
}

func (s *Server) listOffers(c *cloud, r *http.Request, _ []byte, now time.Time) (int, any, *apiError) {
	q := r.URL.Query()
	out := []Offer{}
	for _, of := range c.cfg.Offers {
		if (q.Get("region") == "" || q.Get("region") == of.Region) && (q.Get("gpu") == "" || q.Get("gpu") == of.GPU) {
			if c.stockedOut(&of) {
				of.Availability = AvailabilityNone
			}
			if of.DiskGB == 0 {
				of.DiskGB = DefaultDiskGB
			}
			out = append(out, of)
		}
	}
	// The account's reservations come with its catalog, so that a plan
	// costs one call whether the account holds any or not.
	_, res, _ := s.listReservations(c, r, nil, now)
	return http.StatusOK, offersAnswer{Offers: out, Reservations: res.(map[string][]ReservationView)["reservations"]}, nil
}

// offersAnswer is the answer of GET offers.
type offersAnswer struct {
	Offers       []Offer           `json:"offers"`
	Reservations []ReservationView `json:"reservations"`
}

func (s *Server) createInstance(c *cloud, _ *http.Request, body []byte, now time.Time) (int, any, *apiError) {
	var req createRequest
	if err := decode(body, &req); err != nil {
		return 0, nil, err
	}
	if req.Name == "" || req.OfferID == "" {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "name and offer_id are required")
	}
	for k := range req.Labels {
		if k == "" {
			return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "empty label key")
		}
	}
	of := c.offers[req.OfferID]
	if of == nil {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "unknown offer_id %q", req.OfferID)
	}
	if req.PlacementGroup != "" {
		s.settleAll(c)
		if aerr := c.placementZone(req.PlacementGroup, of); aerr != nil {
			return 0, nil, aerr
		}
	}
	if req.DiskGB < 0 || req.DiskGB > MaxDiskGB {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "disk_gb %d is not between 0 and %d", req.DiskGB, MaxDiskGB)
	}
	if tok := req.IdempotencyToken; tok != "" && !c.cfg.IgnoreIdempotencyToken {
		if in := s.lookup(c, c.tokens[tok]); in != nil {
			c.stats.IdempotentReplays++
			return http.StatusOK, in.view(), nil
		}
	}
	if req.MaxRunSeconds < 0 || req.MaxRunSeconds > 0 && !of.FlexStart {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "max_run_seconds %d: offer %s cannot queue (flex_start)", req.MaxRunSeconds, of.ID)
	}
	if req.MaxRunSeconds > 0 && req.ReservationID != "" {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "a flex-start create cannot launch into a reservation")
	}
	if req.ReservationID != "" {
		s.settleAll(c)
		if err := c.admitReserved(req.ReservationID, of, now); err != nil {
			return 0, nil, err
		}
	} else {
		if err := c.admit(of); err != nil && (req.MaxRunSeconds == 0 || err.code != CodeOutOfCapacity) {
			return 0, nil, err // a flex-start create queues for stock instead
		}
		if len(c.cfg.Quotas) > 0 {
			s.settleAll(c)
			if err := c.admitQuota(of); err != nil {
				return 0, nil, err
			}
		}
	}
	var key *SSHKey
	if req.SSHKey != "" {
		if key = c.sshKeys[req.SSHKey]; key == nil {
			return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "unknown ssh_key %q", req.SSHKey)
		}
	}
	if req.Firewall != "" && c.firewalls[firewallKey(of.Region, req.Firewall)] == nil {
		return 0, nil, errorf(http.StatusBadRequest, CodeUnknownFirewall, "unknown firewall %q in region %s", req.Firewall, of.Region)
	}
	boot, aerr := parseUserData(req.UserData, key)
	if aerr != nil {
		return 0, nil, aerr
	}
	in := s.newInstance(c, of, &req, boot, now)
	s.save()
	s.log.Debug("simserver: created", "cloud", c.cfg.Name, "instance", in.ID, "offer", of.ID)
	if c.chance(c.faults.LostCreateRate) {
		c.stats.LostCreates++
		if c.faults.LostCreateMode == "drop" {
			return 0, nil, &apiError{drop: true, code: "dropped"}
		}
		return 0, nil, errorf(http.StatusInternalServerError, CodeInternal, "internal error, please retry")
	}
	return http.StatusCreated, in.view(), nil
}

func (s *Server) listInstances(c *cloud, r *http.Request, _ []byte, now time.Time) (int, any, *apiError) {
	q := r.URL.Query()
	want, aerr := labelFilter(q["label"], "label")
	if aerr != nil {
		return 0, nil, aerr
	}
	anyOf := map[string][]string{} // label_any: key → the values it may have, distinct
	for _, l := range q["label_any"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "label_any filter %q: want key=value", l)
		}
		if !slices.Contains(anyOf[k], v) {
			anyOf[k] = append(anyOf[k], v)
		}
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "limit %q: want 1..500", v)
		}
		limit = n
	}
	after := ""
	if cur := q.Get("cursor"); cur != "" {
		b, err := base64.RawURLEncoding.DecodeString(cur)
		if err != nil {
			return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "malformed cursor")
		}
		after = string(b)
	}
	withTerminated := q.Get("include_terminated") == "true"
	var ids []string
	for _, in := range s.listable(c, want, anyOf, now) {
		id := in.ID
		if id <= after || now.Before(in.VisibleAt) || (in.Status == StatusTerminated && !withTerminated) {
			continue
		}
		if (q.Get("region") != "" && in.Region != q.Get("region")) || (q.Get("zone") != "" && in.Zone != q.Get("zone")) {
			continue
		}
		if labelsMatch(in.Labels, want, anyOf) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := instanceList{Instances: []Instance{}}
	if len(ids) > limit {
		ids = ids[:limit]
		out.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(ids[limit-1]))
	}
	for _, id := range ids {
		out.Instances = append(out.Instances, c.instances[id].view())
	}
	return http.StatusOK, out, nil
}

// listable settles and returns the instances of c that a listing with
// these label filters may select: the label index's candidates, or every
// instance when no filter can use the index.
func (s *Server) listable(c *cloud, want map[string]string, anyOf map[string][]string, now time.Time) []*instance {
	ids, all := c.candidates(want, anyOf)
	if all {
		s.settleAll(c)
		return slices.Collect(maps.Values(c.instances))
	}
	out, changed := make([]*instance, 0, len(ids)), false
	for _, id := range ids {
		in := c.instances[id]
		if in == nil {
			continue // not expected: the index follows the map (index, unindex)
		}
		if s.settle(c, in, now) {
			changed = true
		}
		if c.instances[id] == in { // settle may have purged it
			out = append(out, in)
		}
	}
	if changed {
		s.save()
	}
	return out
}

// labelFilter reads the key=value filters of a query parameter.
func labelFilter(vals []string, param string) (map[string]string, *apiError) {
	want := map[string]string{}
	for _, l := range vals {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "%s filter %q: want key=value", param, l)
		}
		want[k] = v
	}
	return want, nil
}

// labelsMatch reports whether labels have every value of want and, for
// every key of anyOf, one of its values.
func labelsMatch(labels, want map[string]string, anyOf map[string][]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	for k, vs := range anyOf {
		if !slices.Contains(vs, labels[k]) {
			return false
		}
	}
	return true
}

func (s *Server) getInstance(c *cloud, r *http.Request, _ []byte, _ time.Time) (int, any, *apiError) {
	in := s.lookup(c, r.PathValue("id"))
	if in == nil {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "no instance %q", r.PathValue("id"))
	}
	return http.StatusOK, in.view(), nil
}

func (s *Server) deleteInstance(c *cloud, r *http.Request, _ []byte, now time.Time) (int, any, *apiError) {
	in := s.lookup(c, r.PathValue("id"))
	if in == nil {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "no instance %q", r.PathValue("id"))
	}
	if s.requestDelete(c, in, now) {
		s.save()
	}
	return http.StatusAccepted, in.view(), nil
}

func (s *Server) putFirewall(c *cloud, r *http.Request, body []byte, now time.Time) (int, any, *apiError) {
	region := r.URL.Query().Get("region")
	if region == "" {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "firewalls are regional: the region query parameter is required")
	}
	var req firewallRequest
	if err := decode(body, &req); err != nil {
		return 0, nil, err
	}
	for _, p := range req.Ports {
		if p.Number < 1 || p.Number > 65535 || (p.Protocol != "tcp" && p.Protocol != "udp") {
			return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "invalid port %d/%s", p.Number, p.Protocol)
		}
	}
	sources, aerr := checkSources(req.Sources)
	if aerr != nil {
		return 0, nil, aerr
	}
	name := r.PathValue("name")
	status := http.StatusOK
	fw := c.firewalls[firewallKey(region, name)]
	if fw == nil {
		fw = &Firewall{Name: name, Region: region, CreatedAt: now}
		c.firewalls[firewallKey(region, name)] = fw
		status = http.StatusCreated
	}
	fw.Ports, fw.Sources, fw.Labels = slices.Clone(req.Ports), sources, req.Labels
	if fw.Ports == nil {
		fw.Ports = []Port{}
	}
	s.save()
	return status, *fw, nil
}

func (s *Server) deleteFirewall(c *cloud, r *http.Request, _ []byte, _ time.Time) (int, any, *apiError) {
	region, name := r.URL.Query().Get("region"), r.PathValue("name")
	if region == "" {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "firewalls are regional: the region query parameter is required")
	}
	if c.firewalls[firewallKey(region, name)] == nil {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "no firewall %q in region %s", name, region)
	}
	s.settleAll(c)
	for _, in := range c.instances {
		if in.Firewall == name && in.Region == region && in.Status != StatusTerminated {
			return 0, nil, errorf(http.StatusConflict, CodeConflict, "firewall %q is in use by instance %s (%s)", name, in.ID, in.Status)
		}
	}
	delete(c.firewalls, firewallKey(region, name))
	s.save()
	return http.StatusNoContent, nil, nil
}

func (s *Server) listFirewalls(c *cloud, r *http.Request, _ []byte, _ time.Time) (int, any, *apiError) {
	region := r.URL.Query().Get("region")
	out := []Firewall{}
	for _, f := range c.resources().Firewalls {
		if region == "" || f.Region == region {
			out = append(out, f)
		}
	}
	return http.StatusOK, map[string][]Firewall{"firewalls": out}, nil
}

func (s *Server) putSSHKey(c *cloud, r *http.Request, body []byte, now time.Time) (int, any, *apiError) {
	var req sshKeyRequest
	if err := decode(body, &req); err != nil {
		return 0, nil, err
	}
	if len(req.PublicKeys) == 0 {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "public_keys is empty")
	}
	if _, err := parseAuthorizedKeys(req.PublicKeys); err != nil {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "%v", err)
	}
	name := r.PathValue("name")
	status := http.StatusOK
	k := c.sshKeys[name]
	if k == nil {
		k = &SSHKey{Name: name, CreatedAt: now}
		c.sshKeys[name] = k
		status = http.StatusCreated
	}
	k.PublicKeys, k.Labels = slices.Clone(req.PublicKeys), req.Labels
	s.save()
	return status, *k, nil
}

func (s *Server) deleteSSHKey(c *cloud, r *http.Request, _ []byte, _ time.Time) (int, any, *apiError) {
	name := r.PathValue("name")
	if c.sshKeys[name] == nil {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "no ssh key %q", name)
	}
	delete(c.sshKeys, name)
	s.save()
	return http.StatusNoContent, nil, nil
}

func (s *Server) listSSHKeys(c *cloud, _ *http.Request, _ []byte, _ time.Time) (int, any, *apiError) {
	return http.StatusOK, map[string][]SSHKey{"ssh_keys": c.resources().SSHKeys}, nil
}

func (s *Server) putPlacementGroup(c *cloud, r *http.Request, body []byte, now time.Time) (int, any, *apiError) {
	region := r.URL.Query().Get("region")
	if region == "" {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "placement groups are regional: the region query parameter is required")
	}
	var req placementGroupRequest
	if err := decode(body, &req); err != nil {
		return 0, nil, err
	}
	name, status := r.PathValue("name"), http.StatusOK
	g := c.groups[firewallKey(region, name)]
	if g == nil {
		g = &PlacementGroup{Name: name, Region: region, CreatedAt: now}
		c.groups[firewallKey(region, name)] = g
		status = http.StatusCreated
	}
	g.Labels = req.Labels
	s.save()
	return status, *g, nil
}

func (s *Server) deletePlacementGroup(c *cloud, r *http.Request, _ []byte, _ time.Time) (int, any, *apiError) {
	region, name := r.URL.Query().Get("region"), r.PathValue("name")
	if region == "" {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "placement groups are regional: the region query parameter is required")
	}
	if c.groups[firewallKey(region, name)] == nil {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "no placement group %q in region %s", name, region)
	}
	s.settleAll(c)
	for _, in := range c.instances {
		if in.PlacementGroup == name && in.Region == region && in.Status != StatusTerminated {
			return 0, nil, errorf(http.StatusConflict, CodeConflict, "placement group %q is in use by instance %s (%s)", name, in.ID, in.Status)
		}
	}
	delete(c.groups, firewallKey(region, name))
	s.save()
	return http.StatusNoContent, nil, nil
}

func (s *Server) listPlacementGroups(c *cloud, r *http.Request, _ []byte, _ time.Time) (int, any, *apiError) {
	region := r.URL.Query().Get("region")
	out := []PlacementGroup{}
	for _, g := range c.resources().PlacementGroups {
		if region == "" || g.Region == region {
			out = append(out, g)
		}
	}
	return http.StatusOK, map[string][]PlacementGroup{"placement_groups": out}, nil
}

// placementZone checks a create into group name: the group exists in the
// offer's region, and its live instances are all in the offer's zone.
func (c *cloud) placementZone(name string, of *Offer) *apiError {
	if c.groups[firewallKey(of.Region, name)] == nil {
		return errorf(http.StatusBadRequest, CodeInvalidRequest, "unknown placement_group %q in region %s", name, of.Region)
	}
	for _, in := range c.instances {
		if in.PlacementGroup == name && in.Region == of.Region && in.Status != StatusTerminated && in.Zone != of.Zone {
			return errorf(http.StatusBadRequest, CodeInvalidRequest, "placement group %q holds instance %s in zone %s, not %s", name, in.ID, in.Zone, of.Zone)
		}
	}
	return nil
}
