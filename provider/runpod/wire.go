package runpod

import (
	"context"
	"net/http"
	"net/url"

	"github.com/org/gpuprov/internal/rest"
)

// Wire types: RunPod's REST API v2 JSON.

type wireAvail struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Availability string `json:"availability"` // NONE, LOW, MEDIUM, HIGH
}

type wireGPUType struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Memory    int    `json:"memory"`
	Secure    bool   `json:"secure"`
	Community bool   `json:"community"`
	Price     struct {
		Secure    float64 `json:"secure"`
		Community float64 `json:"community"`
	} `json:"price"`
	MaxCount struct {
		Secure    int `json:"secure"`
		Community int `json:"community"`
	} `json:"maxCount"`
	Availability string      `json:"availability"`
	DataCenters  []wireAvail `json:"dataCenters"`
}

type wireRuntimePort struct {
	Private int     `json:"private"`
	Public  *int    `json:"public"`
	Type    string  `json:"type"`
	IP      *string `json:"ip"`
}

type wirePod struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Status       string            `json:"status"`
	Env          map[string]string `json:"env"`
	Ports        []string          `json:"ports"`
	Cloud        string            `json:"cloud"`
	DataCenterID string            `json:"dataCenterId"`
	Cost         float64           `json:"cost"`
	CreatedAt    string            `json:"createdAt"`
	GPU          *struct {
		ID    string `json:"id"`
		Count int    `json:"count"`
	} `json:"gpu"`
	Runtime *struct {
		Uptime int               `json:"uptime"`
		Ports  []wireRuntimePort `json:"ports"`
	} `json:"runtime"`
	Mounts *wireMounts `json:"mounts"`
}

// wireMounts is Mounts: at most one network volume (maxItems 1), and
// nothing else the adapter sends (the host-local "persistent" mount is
// never asked for).
type wireMounts struct {
	Network []wireNetworkMount `json:"network,omitempty"`
}

// wireNetworkMount is NetworkMount: a network volume in the pod's data
// center and the path the container sees it at.
type wireNetworkMount struct {
	VolumeID string `json:"volumeId"`
	Path     string `json:"path"`
}

// wireVolume is NetworkVolume. RunPod keeps no labels, no status and no
// creation time on a network volume.
type wireVolume struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Size       int    `json:"size"`
	DataCenter string `json:"dataCenter"`
	Type       string `json:"type"`
}

// wireCreateVolume is CreateNetworkVolumeRequest; type is left out, so
// the data center's default tier is used.
type wireCreateVolume struct {
	Name       string `json:"name"`
	Size       int    `json:"size"`
	DataCenter string `json:"dataCenter"`
}

// wireDataCenter is the part of DataCenter the adapter reads.
type wireDataCenter struct {
	ID                 string   `json:"id"`
	NetworkVolumeTypes []string `json:"networkVolumeTypes"`
}

type wireGPU struct {
	ID    string `json:"id"`
	Count int    `json:"count"`
}

type wireCreate struct {
	Name          string            `json:"name"`
	Image         string            `json:"image"`
	GPU           wireGPU           `json:"gpu"`
	Cloud         string            `json:"cloud"`
	DataCenterIDs []string          `json:"dataCenterIds,omitempty"`
	Ports         []string          `json:"ports"`
	Env           map[string]string `json:"env"`
	Disk          int               `json:"disk,omitempty"`
	Mounts        *wireMounts       `json:"mounts,omitempty"`
}

// call sends one request and classifies its failure for op.
func (p *Provider) call(ctx context.Context, op, method, path string, q url.Values, in, out any) error {
	if err := p.base.Do(ctx, op, rest.Request{Method: method, Path: path, Query: q, Body: in, Out: out}); err != nil {
		return p.classify(op, err)
	}
	return nil
}

// listPods reads GET /pods. The v2 listing is not paginated: it returns
// every pod of the account (cluster members excluded).
func (p *Provider) listPods(ctx context.Context, op string) ([]wirePod, error) {
	var out struct {
		Pods []wirePod `json:"pods"`
	}
	if err := p.call(ctx, op, http.MethodGet, "/pods", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Pods, nil
}
