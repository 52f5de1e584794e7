package simserver

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"testing"
)

// TestFirewallSources: a firewall opens its ports to its sources (the
// PUT's, sorted; 0.0.0.0/0 when it names none) and, on a port with peers,
// to the instances that use it, as an AWS security group's rule may name
// the group itself. A source that is not a CIDR is 400 invalid_request
// (the package documentation's API and Errors). The admin view
// (GET /admin/clouds/{cloud}/resources) shows the sources and the peers.
func TestFirewallSources(t *testing.T) {
	s, _ := start(t, nil)
	key := s.APIKey("c1")
	put := func(name string, body map[string]any) (int, Firewall, errorBody) {
		t.Helper()
		var raw json.RawMessage
		var fw Firewall
		var eb errorBody
		resp := request(t, s, "PUT", "/clouds/c1/v1/firewalls/"+name+"?region=eu-west", key, body, &raw)
		into := any(&fw)
		if resp.StatusCode >= 400 {
			into = &eb
		}
		if err := json.Unmarshal(raw, into); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, fw, eb
	}
	ports := []any{map[string]any{"number": 22, "protocol": "tcp"}, map[string]any{"number": 6443, "protocol": "tcp", "peers": true}}

	status, open, _ := put("open", map[string]any{"ports": ports})
	if status != http.StatusCreated || !slices.Equal(open.Sources, DefaultSources) {
		t.Fatalf("no sources: %d %+v, want 201 and %v", status, open, DefaultSources)
	}
	status, fw, _ := put("office", map[string]any{"ports": ports, "sources": []string{"203.0.113.0/24", "192.0.2.0/24", "203.0.113.0/24"}})
	if status != http.StatusCreated || !slices.Equal(fw.Sources, []string{"192.0.2.0/24", "203.0.113.0/24"}) {
		t.Fatalf("sources: %d %+v, want them sorted, once each", status, fw)
	}
	for _, bad := range []string{"office", "203.0.113.7/24", "203.0.113.7"} {
		status, _, eb := put("bad", map[string]any{"ports": ports, "sources": []string{bad}})
		if status != http.StatusBadRequest || eb.Error.Code != CodeInvalidRequest {
			t.Errorf("source %q: %d %+v, want 400 %s", bad, status, eb, CodeInvalidRequest)
		}
	}

	inside, outside := netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("198.51.100.1")
	for _, tc := range []struct {
		fw     Firewall
		port   int
		from   netip.Addr
		peer   bool
		admits bool
	}{
		{fw, 22, inside, false, true},
		{fw, 6443, inside, false, true},
		{fw, 22, outside, false, false},
		{fw, 6443, outside, false, false},
		{fw, 6443, outside, true, true}, // a peer, by the port's peers
		{fw, 22, outside, true, false},  // SSH has no peers
		{fw, 8080, inside, false, false},
		{open, 6443, outside, false, true},
	} {
		if got := tc.fw.Admits(tc.port, "tcp", tc.from, tc.peer); got != tc.admits {
			t.Errorf("%s admits %d/tcp from %s (peer %v): %v, want %v", tc.fw.Name, tc.port, tc.from, tc.peer, got, tc.admits)
		}
	}

	var res Resources
	request(t, s, "GET", "/admin/clouds/c1/resources", s.AdminToken(), nil, &res)
	i := slices.IndexFunc(res.Firewalls, func(f Firewall) bool { return f.Name == "office" })
	if i < 0 || !slices.Equal(res.Firewalls[i].Sources, fw.Sources) || !res.Firewalls[i].Ports[1].Peers || res.Firewalls[i].Ports[0].Peers {
		t.Fatalf("admin view %+v, want office's sources and 6443's peers", res.Firewalls)
	}
}
