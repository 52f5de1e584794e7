package vastai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/provider"
)

// Wire types: Vast.ai's REST API JSON, as its OpenAPI document
// (testdata/openapi.json) and its CLI (vast-ai/vast-cli, vastai/api and
// vastai/data) describe it. Units are Vast's: gpu_ram and cpu_ram in MB,
// disk_space in GB, dph_total in USD per hour for the whole offer.

// wireOffer is one offer of POST /api/v0/bundles/ (searchOffers), an ask
// for num_gpus GPUs of one machine.
type wireOffer struct {
	ID                int64   `json:"id"` // the ask id PUT /api/v0/asks/{id}/ accepts
	MachineID         int64   `json:"machine_id"`
	HostID            int64   `json:"host_id"`
	GPUName           string  `json:"gpu_name"`
	NumGPUs           int     `json:"num_gpus"`
	GPURAM            float64 `json:"gpu_ram"` // per GPU, MB
	GPUFrac           float64 `json:"gpu_frac"`
	CPUCoresEffective float64 `json:"cpu_cores_effective"`
	CPURAM            float64 `json:"cpu_ram"`    // MB
	DiskSpace         float64 `json:"disk_space"` // GB the offer can allocate
	DPHTotal          float64 `json:"dph_total"`  // USD/h, the allocated storage included
	Reliability       float64 `json:"reliability"`
	Reliability2      float64 `json:"reliability2"`
	Verification      string  `json:"verification"` // verified, unverified, deverified
	Rentable          *bool   `json:"rentable"`
	IsBid             bool    `json:"is_bid"`
	Geolocation       string  `json:"geolocation"` // "Texas, US"
}

// filter is one of the search's field filters: {"eq": v}, {"gte": v}, ...
type filter map[string]any

// wireCreate is the body of PUT /api/v0/asks/{id}/ (createInstance). The
// identity is the label; the onstart script installs the keys.
type wireCreate struct {
	Image         string  `json:"image"`
	Disk          float64 `json:"disk"`
	Label         string  `json:"label"`
	Onstart       string  `json:"onstart"`
	Runtype       string  `json:"runtype"`
	TargetState   string  `json:"target_state"`
	CancelUnavail bool    `json:"cancel_unavail"`
}

// wireCreated is createInstance's 200 answer; new_contract is the instance id.
type wireCreated struct {
	Success     bool  `json:"success"`
	NewContract int64 `json:"new_contract"`
	// The answer also carries instance_api_key, a key restricted to the
	// instance; it is deliberately not decoded, so it is never kept.
}

// wirePort is one host binding of a container port (ports["22/tcp"]).
type wirePort struct {
	HostIP   string `json:"HostIp"`
	HostPort string `json:"HostPort"`
}

// wireInstance is one instance of GET /api/v1/instances/ (show instances):
// the columns listCols asks for. Its onstart (which may hold the injected
// host key) is deliberately neither asked for nor decoded.
type wireInstance struct {
	ID             int64                 `json:"id"`
	Label          string                `json:"label"`         // null when unlabelled
	ActualStatus   string                `json:"actual_status"` // null while provisioning
	IntendedStatus string                `json:"intended_status"`
	CurState       string                `json:"cur_state"`
	NextState      string                `json:"next_state"`
	StatusMsg      string                `json:"status_msg"`
	MachineID      int64                 `json:"machine_id"`
	GPUName        string                `json:"gpu_name"`
	NumGPUs        int                   `json:"num_gpus"`
	PublicIPAddr   string                `json:"public_ipaddr"`
	SSHHost        string                `json:"ssh_host"`
	SSHPort        int                   `json:"ssh_port"`
	Ports          map[string][]wirePort `json:"ports"`      // only on running instances
	StartDate      float64               `json:"start_date"` // Unix seconds
	Geolocation    string                `json:"geolocation"`
}

// call sends one request and classifies its failure for op.
func (p *Provider) call(ctx context.Context, op, method, path string, q url.Values, in, out any) error {
	if err := p.base.Do(ctx, op, rest.Request{Method: method, Path: path, Query: q, Body: in, Out: out}); err != nil {
		return p.classify(op, err)
	}
	return nil
}

// listCols are the columns of GET /api/v1/instances/ the adapter reads
// (wireInstance's fields), sent as select_cols ("JSON array of column names
// to return"; the default, ["*"], is every column). Every column would
// include onstart, which holds the private host key with InjectHostKey: a
// listing never asks for it.
var listCols = []string{"id", "label", "actual_status", "intended_status", "cur_state", "next_state", "status_msg",
	"machine_id", "gpu_name", "num_gpus", "public_ipaddr", "ssh_host", "ssh_port", "ports", "start_date", "geolocation"}

// listOrder is the order the listing pages in: by id, ascending (Vast
// appends id as the tiebreaker of any order, so id alone is the keyset).
const listOrder = `[{"col":"id","dir":"asc"}]`

// listPageSize is the listing's page: the v1 listing's maximum, 25.
const listPageSize = 25

// defaultMaxListPages bounds one listing: 1,000 pages of 25, 25,000
// instances. A listing that still has pages after it fails with ErrListCap
// rather than answer with part of the account.
const defaultMaxListPages = 1000

// ErrListCap is wrapped by the error of a listing that reached the page cap
// with pages still to read, and of one whose next_token repeated: its
// answer would be partial, and an instance missing from it would look
// gone (the core would create the VM again, or miss an orphan).
var ErrListCap = errors.New("the instance listing did not end")

// listInstances reads every page of GET /api/v1/instances/ (showInstances)
// whose rows match filters (select_filters; label and id are filterable
// columns), with only listCols, following each answer's next_token as the
// next request's after_token until it is null (the document's keyset
// pagination). A listing with more than the cap's pages, or whose
// next_token repeats, is a Failed error wrapping ErrListCap that blocks
// the provider: never a truncated answer.
func (p *Provider) listInstances(ctx context.Context, op string, filters map[string]filter) ([]wireInstance, error) {
	sel, err := json.Marshal(filters)
	if err != nil {
		return nil, provider.Errorf(provider.Failed, p.base.Name, op, "encode select_filters: %w", err)
	}
	cols, err := json.Marshal(listCols)
	if err != nil {
		return nil, provider.Errorf(provider.Failed, p.base.Name, op, "encode select_cols: %w", err)
	}
	q := url.Values{"limit": {strconv.Itoa(listPageSize)}, "order_by": {listOrder}, "select_cols": {string(cols)},
		"select_filters": {string(sel)}}
	var all []wireInstance
	seen := map[string]bool{}
	for pages := 1; ; pages++ {
		var page struct {
			Instances []wireInstance `json:"instances"`
			NextToken *string        `json:"next_token"`
		}
		if err := p.call(ctx, op, http.MethodGet, "/api/v1/instances/", q, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Instances...)
		if page.NextToken == nil || *page.NextToken == "" {
			return all, nil
		}
		next := *page.NextToken
		switch {
		case pages >= p.maxListPages:
			return nil, p.listCapError(op, fmt.Errorf("%w: more than %d pages (%d instances read, more to come): refusing a partial listing",
				ErrListCap, p.maxListPages, len(all)))
		case seen[next]:
			return nil, p.listCapError(op, fmt.Errorf("%w: page %d repeated an earlier next_token", ErrListCap, pages))
		}
		seen[next] = true
		q.Set("after_token", next)
	}
}

// listCapError is a listing that cannot be completed: Failed, blocking the
// provider (every offer's create lists first, and would fail the same way).
func (p *Provider) listCapError(op string, err error) *provider.Error {
	return &provider.Error{Kind: provider.Failed, Op: op, Provider: p.base.Name, Block: provider.ScopeProvider, Err: err}
}

func idString(id int64) string { return strconv.FormatInt(id, 10) }

// parseID returns the instance id s names, or false for a string that is no
// Vast instance id.
func parseID(s string) (int64, bool) {
	id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return id, err == nil && id > 0
}
