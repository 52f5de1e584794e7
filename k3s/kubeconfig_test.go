package k3s_test

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/org/gpuprov/k3s"
)

// kubeconfigDoc is the part of a kubeconfig the tests look at.
type kubeconfigDoc struct {
	Clusters []struct {
		Name    string `yaml:"name"`
		Cluster struct {
			Server string `yaml:"server"`
			CA     string `yaml:"certificate-authority-data"`
		} `yaml:"cluster"`
	} `yaml:"clusters"`
	Contexts []struct {
		Name string `yaml:"name"`
	} `yaml:"contexts"`
	CurrentContext string `yaml:"current-context"`
	Users          []struct {
		Name string `yaml:"name"`
		User struct {
			Key string `yaml:"client-key-data"`
		} `yaml:"user"`
	} `yaml:"users"`
}

func TestRewriteKubeconfigEditsOnlyTheServerField(t *testing.T) {
	// The old URL also appears as the cluster's, context's and user's name
	// and in a comment: a string replace would rename them all.
	const raw = `# k3s admin for https://127.0.0.1:6443
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0E=
    server: https://127.0.0.1:6443
  name: https://127.0.0.1:6443
contexts:
- context:
    cluster: https://127.0.0.1:6443
    user: https://127.0.0.1:6443
  name: https://127.0.0.1:6443
current-context: https://127.0.0.1:6443
kind: Config
preferences: {}
users:
- name: https://127.0.0.1:6443
  user:
    client-key-data: S0VZ
`
	out, err := k3s.RewriteKubeconfig([]byte(raw), "https://203.0.113.10:6443")
	if err != nil {
		t.Fatal(err)
	}
	var doc kubeconfigDoc
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("rewritten kubeconfig does not parse: %v\n%s", err, out)
	}
	c := doc.Clusters[0]
	if c.Cluster.Server != "https://203.0.113.10:6443" {
		t.Errorf("server %q", c.Cluster.Server)
	}
	if c.Name != "https://127.0.0.1:6443" || doc.Contexts[0].Name != c.Name || doc.CurrentContext != c.Name ||
		doc.Users[0].Name != c.Name || c.Cluster.CA != "Q0E=" || doc.Users[0].User.Key != "S0VZ" {
		t.Errorf("other fields changed:\n%s", out)
	}
	if strings.Count(string(out), "203.0.113.10") != 1 || !strings.HasPrefix(string(out), "# k3s admin for https://127.0.0.1:6443\n") {
		t.Errorf("rewrite touched more than the server field:\n%s", out)
	}
}

func TestRewriteKubeconfigEveryClusterAndIPv6(t *testing.T) {
	const raw = "clusters:\n- name: a\n  cluster:\n    server: https://127.0.0.1:6443\n- name: b\n  cluster: {}\n"
	out, err := k3s.RewriteKubeconfig([]byte(raw), "https://[2001:db8::1]:6443")
	if err != nil {
		t.Fatal(err)
	}
	var doc kubeconfigDoc
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	for _, c := range doc.Clusters {
		if c.Cluster.Server != "https://[2001:db8::1]:6443" {
			t.Errorf("cluster %s: server %q", c.Name, c.Cluster.Server)
		}
	}
}

func TestRewriteKubeconfigRejects(t *testing.T) {
	cases := []struct{ name, raw, url string }{
		{"not yaml", "clusters: [", "https://1.2.3.4:6443"},
		{"no clusters", "apiVersion: v1\nkind: Config\n", "https://1.2.3.4:6443"},
		{"a list", "- a\n", "https://1.2.3.4:6443"},
		{"cluster not a mapping", "clusters:\n- cluster: x\n", "https://1.2.3.4:6443"},
		{"http URL", "clusters:\n- cluster: {}\n", "http://1.2.3.4:6443"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := k3s.RewriteKubeconfig([]byte(c.raw), c.url); !errors.Is(err, k3s.ErrInvalid) {
				t.Errorf("want ErrInvalid, got %v", err)
			}
		})
	}
}

func TestDevicePluginManifest(t *testing.T) {
	dec := yaml.NewDecoder(strings.NewReader(string(k3s.DevicePluginManifest("v0.17.1"))))
	var kinds []string
	for {
		var obj struct {
			Kind     string `yaml:"kind"`
			Handler  string `yaml:"handler"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
			Spec struct {
				Template struct {
					Spec struct {
						RuntimeClassName string            `yaml:"runtimeClassName"`
						NodeSelector     map[string]string `yaml:"nodeSelector"`
						Containers       []struct {
							Image string `yaml:"image"`
						} `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&obj); err != nil {
			break
		}
		kinds = append(kinds, obj.Kind)
		switch obj.Kind {
		case "RuntimeClass":
			if obj.Metadata.Name != "nvidia" || obj.Handler != "nvidia" {
				t.Errorf("runtime class %+v", obj)
			}
		case "DaemonSet":
			s := obj.Spec.Template.Spec
			if s.RuntimeClassName != "nvidia" || s.NodeSelector[k3s.LabelGPUPresent] != "true" ||
				len(s.Containers) != 1 || !strings.HasSuffix(s.Containers[0].Image, "/k8s-device-plugin:v0.17.1") {
				t.Errorf("daemon set %+v", s)
			}
		}
	}
	if strings.Join(kinds, ",") != "RuntimeClass,DaemonSet" {
		t.Errorf("kinds %v", kinds)
	}
}
