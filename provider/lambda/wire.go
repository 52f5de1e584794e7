package lambda

import (
	"context"
	"net/http"
	"net/url"

	"github.com/org/gpuprov/internal/rest"
)

// Wire types: the Lambda Cloud API's JSON, kept apart from the provider's.

type wireRegion struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

type wireInstanceType struct {
	Name              string `json:"name"`
	Description       string `json:"description"`
	GPUDescription    string `json:"gpu_description"`
	PriceCentsPerHour int    `json:"price_cents_per_hour"`
	Specs             struct {
		VCPUs      int `json:"vcpus"`
		MemoryGiB  int `json:"memory_gib"`
		StorageGiB int `json:"storage_gib"`
		GPUs       int `json:"gpus"`
	} `json:"specs"`
}

type wireInstanceTypeItem struct {
	InstanceType                 wireInstanceType `json:"instance_type"`
	RegionsWithCapacityAvailable []wireRegion     `json:"regions_with_capacity_available"`
}

type wireTag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type wireRulesetRef struct {
	ID string `json:"id"`
}

type wireInstance struct {
	ID               string           `json:"id"`
	Name             string           `json:"name"`
	IP               string           `json:"ip"`
	PrivateIP        string           `json:"private_ip"`
	Status           string           `json:"status"`
	SSHKeyNames      []string         `json:"ssh_key_names"`
	Region           wireRegion       `json:"region"`
	InstanceType     wireInstanceType `json:"instance_type"`
	Hostname         string           `json:"hostname"`
	Tags             []wireTag        `json:"tags"`
	FirewallRulesets []wireRulesetRef `json:"firewall_rulesets"`
	// FileSystemNames are the filesystems the instance mounts (empty for
	// none); FileSystemMounts their mount points, absent for none.
	FileSystemNames  []string    `json:"file_system_names"`
	FileSystemMounts []wireMount `json:"file_system_mounts"`
}

func (in *wireInstance) tag(key string) string {
	for _, t := range in.Tags {
		if t.Key == key {
			return t.Value
		}
	}
	return ""
}

type wireSSHKey struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	PublicKey string `json:"public_key"`
}

type wireRule struct {
	Protocol      string `json:"protocol"`
	PortRange     []int  `json:"port_range,omitempty"`
	SourceNetwork string `json:"source_network"`
	Description   string `json:"description"`
}

type wireRuleset struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	Region      wireRegion `json:"region"`
	Rules       []wireRule `json:"rules"`
	Created     string     `json:"created"`
	InstanceIDs []string   `json:"instance_ids"`
}

type wireImageSpec struct {
	Family string `json:"family,omitempty"`
}

type wireLaunch struct {
	RegionName       string           `json:"region_name"`
	InstanceTypeName string           `json:"instance_type_name"`
	SSHKeyNames      []string         `json:"ssh_key_names"`
	Name             string           `json:"name"`
	Tags             []wireTag        `json:"tags"`
	UserData         string           `json:"user_data,omitempty"`
	Image            *wireImageSpec   `json:"image,omitempty"`
	FirewallRulesets []wireRulesetRef `json:"firewall_rulesets,omitempty"`
	FileSystemNames  []string         `json:"file_system_names,omitempty"`
	FileSystemMounts []wireMount      `json:"file_system_mounts,omitempty"`
}

// wireMount is a FilesystemMountEntry (an instance's) or a
// RequestedFilesystemMountEntry (a launch's): a filesystem and where the
// instance mounts it.
type wireMount struct {
	MountPoint   string `json:"mount_point"`
	FileSystemID string `json:"file_system_id"`
}

// wireFilesystem is a Filesystem. It has no size (bytes_used is an
// estimate, updated every few hours) and no tags.
type wireFilesystem struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	MountPoint string     `json:"mount_point"` // the default one, /lambda/nfs/<name>
	Created    string     `json:"created"`
	IsInUse    bool       `json:"is_in_use"`
	Region     wireRegion `json:"region"`
}

type wireAuditEvent struct {
	Action            string         `json:"action"`
	ResourceName      string         `json:"resource_name"`
	EventTime         string         `json:"event_time"`
	ResourceLRNs      []string       `json:"resource_lrns"`
	AdditionalDetails map[string]any `json:"additional_details"`
}

// call sends one request and classifies its failure for op.
func (p *Provider) call(ctx context.Context, op, method, path string, q url.Values, in, out any) error {
	if err := p.base.Do(ctx, op, rest.Request{Method: method, Path: path, Query: q, Body: in, Out: out}); err != nil {
		return p.classify(op, err)
	}
	return nil
}

// listInstances returns every instance the account can see (the API does not
// paginate /instances).
func (p *Provider) listInstances(ctx context.Context, op string) ([]wireInstance, error) {
	var out struct {
		Data []wireInstance `json:"data"`
	}
	if err := p.call(ctx, op, http.MethodGet, "/instances", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}
