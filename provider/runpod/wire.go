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
