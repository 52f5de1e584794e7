package primeintellect

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/org/gpuprov/internal/rest"
)

// Wire types: the Prime Intellect API's JSON.

type wireAvailability struct {
	CloudID     string `json:"cloudId"`
	GPUType     string `json:"gpuType"`
	Socket      string `json:"socket"`
	Provider    string `json:"provider"`
	Region      string `json:"region"`
	DataCenter  string `json:"dataCenter"`
	Country     string `json:"country"`
	GPUCount    int    `json:"gpuCount"`
	GPUMemory   int    `json:"gpuMemory"`
	StockStatus string `json:"stockStatus"`
	Security    string `json:"security"`
	IsSpot      bool   `json:"isSpot"`
	// PrepaidTime, when positive, is hours charged at the order whether
	// used or not (openapi.json, GpuAvailability.prepaidTime).
	PrepaidTime *float64 `json:"prepaidTime"`
	Images      []string `json:"images"`
	Prices      struct {
		OnDemand       *float64 `json:"onDemand"`
		CommunityPrice *float64 `json:"communityPrice"`
		Currency       string   `json:"currency"`
	} `json:"prices"`
	VCPU struct {
		DefaultCount int `json:"defaultCount"`
	} `json:"vcpu"`
	Memory struct {
		DefaultCount int `json:"defaultCount"`
	} `json:"memory"`
	Disk struct {
		DefaultCount int `json:"defaultCount"`
		MaxCount     int `json:"maxCount"`
	} `json:"disk"`
}

type wirePortMapping struct {
	Internal string `json:"internal"`
	External string `json:"external"`
	Protocol string `json:"protocol"`
	UsedBy   string `json:"usedBy"`
}

type wirePod struct {
	ID                   string            `json:"id"`
	Name                 string            `json:"name"`
	Status               string            `json:"status"`
	InstallationStatus   string            `json:"installationStatus"`
	InstallationFailure  string            `json:"installationFailure"`
	InstallationProgress *int              `json:"installationProgress"`
	GPUName              string            `json:"gpuName"`
	GPUCount             int               `json:"gpuCount"`
	Socket               string            `json:"socket"`
	ProviderType         string            `json:"providerType"`
	PriceHr              float64           `json:"priceHr"`
	SSHConnection        json.RawMessage   `json:"sshConnection"` // a string, or a list for multi-node
	IP                   json.RawMessage   `json:"ip"`
	PrimePortMapping     []wirePortMapping `json:"primePortMapping"`
	CreatedAt            string            `json:"createdAt"`
	TerminatedAt         string            `json:"terminatedAt"`
	IsSpot               bool              `json:"isSpot"`
}

type wireSSHKey struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	PublicKey string `json:"publicKey"`
}

type wireHistory struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	CreatedAt    string `json:"createdAt"`
	TerminatedAt string `json:"terminatedAt"`
}

// call sends one request and classifies its failure for op.
func (p *Provider) call(ctx context.Context, op, method, path string, q url.Values, in, out any) error {
	if err := p.base.Do(ctx, op, rest.Request{Method: method, Path: path, Query: q, Body: in, Out: out}); err != nil {
		return p.classify(op, err)
	}
	return nil
}

// pageSize is the page size of offset/limit listings.
const pageSize = 100

// listPods pages through GET /pods/ (offset/limit, total_count).
func (p *Provider) listPods(ctx context.Context, op string) ([]wirePod, error) {
	var all []wirePod
	for offset := 0; ; {
		var page struct {
			TotalCount int       `json:"total_count"`
			Data       []wirePod `json:"data"`
		}
		q := url.Values{"offset": {strconv.Itoa(offset)}, "limit": {strconv.Itoa(pageSize)}}
		if err := p.call(ctx, op, http.MethodGet, "/pods/", q, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Data...)
		offset += len(page.Data)
		if len(page.Data) == 0 || offset >= page.TotalCount {
			return all, nil
		}
	}
}

// listKeys pages through GET /ssh_keys/.
func (p *Provider) listKeys(ctx context.Context, op string) ([]wireSSHKey, error) {
	var all []wireSSHKey
	for offset := 0; ; {
		var page struct {
			TotalCount  int          `json:"total_count"`
			TotalCount2 int          `json:"totalCount"`
			Data        []wireSSHKey `json:"data"`
		}
		q := url.Values{"offset": {strconv.Itoa(offset)}, "limit": {strconv.Itoa(pageSize)}}
		if err := p.call(ctx, op, http.MethodGet, "/ssh_keys/", q, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Data...)
		offset += len(page.Data)
		if len(page.Data) == 0 || offset >= max(page.TotalCount, page.TotalCount2) {
			return all, nil
		}
	}
}
