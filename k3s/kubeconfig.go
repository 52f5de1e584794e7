package k3s

import (
	"bytes"
	"fmt"
	"net/url"

	"go.yaml.in/yaml/v3"
)

// RewriteKubeconfig parses raw (a kubeconfig, as k3s writes it to
// /etc/rancher/k3s/k3s.yaml) as YAML and returns it with the server of
// every entry of clusters set to serverURL, everything else kept. It edits
// the parsed document, never the text: a cluster, context or user that
// happens to be named like the old URL keeps its name. The error wraps
// ErrInvalid when serverURL is not an https URL, or when raw is not a
// kubeconfig with at least one cluster.
func RewriteKubeconfig(raw []byte, serverURL string) ([]byte, error) {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%w: kubeconfig server %q must be an https URL", ErrInvalid, serverURL)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%w: kubeconfig: %v", ErrInvalid, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: kubeconfig is not a YAML mapping", ErrInvalid)
	}
	clusters := mapValue(doc.Content[0], "clusters")
	if clusters == nil || clusters.Kind != yaml.SequenceNode || len(clusters.Content) == 0 {
		return nil, fmt.Errorf("%w: kubeconfig has no clusters", ErrInvalid)
	}
	for i, entry := range clusters.Content {
		cluster := mapValue(entry, "cluster")
		if cluster == nil || cluster.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%w: kubeconfig clusters[%d] has no cluster mapping", ErrInvalid, i)
		}
		server := mapValue(cluster, "server")
		if server == nil {
			cluster.Content = append(cluster.Content,
				&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "server"},
				&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: serverURL})
			continue
		}
		*server = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: serverURL}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("k3s: encode kubeconfig: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("k3s: encode kubeconfig: %w", err)
	}
	return buf.Bytes(), nil
}

// mapValue returns the value of key in the mapping m, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
