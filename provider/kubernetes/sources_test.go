package kubernetes

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/org/gpuprov/provider"
)

// Who may connect is the LoadBalancer Service's
// spec.loadBalancerSourceRanges ("If specified and supported by the
// platform, this will restrict traffic through the cloud-provider
// load-balancer will be restricted to the specified client IPs. This field
// will be ignored if the cloud-provider does not support the feature.",
// ServiceSpec in k8s.io/api v0.37.2 core/v1/types.go): the configured source_ranges reach the
// Service the API receives; a request's ranges win over them; for a
// cluster node (OpenPorts 6443/tcp and 51820/udp) only the caller's ranges
// are there, the pods of the cluster reaching each other over the cluster
// network; unrestricted, the field is left unset.
func TestSourceRangesReachTheService(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		configured []string
		spec       func(*provider.InstanceSpec)
		want       []string
		ports      []int32
	}{
		{"configured", []string{"203.0.113.0/24", "2001:db8::/32"}, func(*provider.InstanceSpec) {},
			[]string{"2001:db8::/32", "203.0.113.0/24"}, []int32{22}},
		{"cluster node, the request's ranges", []string{"203.0.113.0/24"}, func(s *provider.InstanceSpec) {
			s.SourceRanges = []string{"198.51.100.0/24"}
			s.OpenPorts = []provider.Port{{Number: 6443, Protocol: "tcp"}, {Number: 51820, Protocol: "udp"}}
		}, []string{"198.51.100.0/24"}, []int32{22, 6443, 51820}},
		{"unrestricted", nil, func(*provider.InstanceSpec) {}, nil, []int32{22}},
		{"everyone named", []string{"0.0.0.0/0"}, func(*provider.InstanceSpec) {}, nil, []int32{22}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
			p := c.provider(t, Config{ServiceType: ServiceLoadBalancer, SourceRanges: tc.configured})
			o := planOne(t, p, provider.ResourceRequest{GPU: "L4"})
			s := spec("fenced", 1)
			tc.spec(s)
			if _, err := p.Prepare(ctx, &o, s); err != nil {
				t.Fatal(err)
			}
			svc, err := c.cs.CoreV1().Services(namespace).Get(ctx, "gpuprov-fenced", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var ports []int32
			for _, sp := range svc.Spec.Ports {
				ports = append(ports, sp.Port)
			}
			if !slices.Equal(svc.Spec.LoadBalancerSourceRanges, tc.want) || !slices.Equal(ports, tc.ports) {
				t.Fatalf("service ranges %v ports %v, want %v and %v", svc.Spec.LoadBalancerSourceRanges, ports, tc.want, tc.ports)
			}
		})
	}
}

// A NodePort or ClusterIP Service cannot restrict who connects: such a
// configuration lists FeatureSourceRanges unsupported (the core does not
// plan a request with source ranges on it) and refuses source_ranges; a
// LoadBalancer supports it. Bad ranges are refused by New, naming the key
// and the value, before anything is built.
func TestSourceRangesConfig(t *testing.T) {
	cs := fake.NewClientset()
	for _, st := range []string{"", ServiceNodePort, ServiceClusterIP, ServiceLoadBalancer} {
		p, err := New(Config{ServiceType: st}, WithClientset(cs))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := p.Capabilities().Supports(provider.FeatureSourceRanges), st == ServiceLoadBalancer; got != want {
			t.Errorf("service type %q: supports source ranges %v, want %v", st, got, want)
		}
	}
	for _, tc := range []struct {
		cfg  Config
		want []string
	}{
		{Config{ServiceType: ServiceLoadBalancer, SourceRanges: []string{"office"}}, []string{"kubernetes: source_ranges: ", `"office"`}},
		{Config{ServiceType: ServiceLoadBalancer, SourceRanges: []string{"10.1.2.3/8"}}, []string{"kubernetes: source_ranges: ", `"10.1.2.3/8"`, "10.0.0.0/8"}},
		{Config{SourceRanges: []string{"203.0.113.0/24"}}, []string{"kubernetes: source_ranges: ", "203.0.113.0/24", "NodePort Service cannot restrict", `service_type = "LoadBalancer"`}},
		{Config{ServiceType: "clusterip", SourceRanges: []string{"203.0.113.0/24"}}, []string{"source_ranges: ", "clusterip Service cannot restrict"}},
	} {
		_, err := New(tc.cfg, WithClientset(cs))
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v, want an error containing %q", tc.cfg, err, w)
			}
		}
		if err != nil && strings.Count(err.Error(), "kubernetes:") != 1 {
			t.Errorf("%v: want one prefix", err)
		}
	}
}

// The login user goes into the pod's start script, which creates it and
// expands ~user in the shell: a name that is not a Linux user name (the
// rule the Azure adapter applies to its admin user) is InvalidRequest from
// Prepare and Create, naming it, before anything is made.
func TestSSHUserIsValidated(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	p := c.provider(t, Config{})
	o := planOne(t, p, provider.ResourceRequest{GPU: "L4"})
	for _, bad := range []string{`x"; reboot; "`, "$(id)", "Ubuntu", "-root", "a b", "ubuntu~", strings.Repeat("a", 33)} {
		s := spec("named", 1)
		s.SSHUser = bad
		_, err := p.Prepare(ctx, &o, s)
		if provider.KindOf(err) != provider.InvalidRequest || !strings.Contains(err.Error(), "ssh user") {
			t.Errorf("Prepare with user %q: %v, want invalid-request naming it", bad, err)
		}
		_, err = p.Create(ctx, &o, []byte(`{"namespace":"gpuprov","secret":"gpuprov-named","service":"gpuprov-named"}`), s)
		if provider.KindOf(err) != provider.InvalidRequest {
			t.Errorf("Create with user %q: %v, want invalid-request", bad, err)
		}
	}
	if pods, svcs, secs := c.names(t, podsGVR), c.names(t, svcGVR), c.names(t, secGVR); len(pods)+len(svcs)+len(secs) != 0 {
		t.Fatalf("made for a bad user: pods %v services %v secrets %v", pods, svcs, secs)
	}
	for _, good := range []string{"", "root", "ubuntu", "_svc", "ml-user1", strings.Repeat("a", 32)} {
		s := spec("named", 1)
		s.SSHUser = good
		if _, err := p.Prepare(ctx, &o, s); err != nil {
			t.Errorf("Prepare with user %q: %v", good, err)
		}
	}
	pod := p.podFor(&o, detail{Label: LabelGPUProduct, Product: "NVIDIA-L4"}, spec("named", 1), "root")
	if pod.Spec.Containers[0].Env[0] != (corev1.EnvVar{Name: "GPUPROV_SSH_USER", Value: "root"}) {
		t.Fatalf("env %+v", pod.Spec.Containers[0].Env)
	}
}
