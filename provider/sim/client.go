package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/provider"
)

// Wire types: the server's JSON, kept apart from the provider's types.

type wireOffer struct {
	ID           string  `json:"id"`
	Region       string  `json:"region"`
	Zone         string  `json:"zone"`
	InstanceType string  `json:"instance_type"`
	GPU          string  `json:"gpu"`
	GPUCount     int     `json:"gpu_count"`
	GPUMemoryGB  int     `json:"gpu_memory_gb"`
	VCPUs        int     `json:"vcpus"`
	MemoryGB     float64 `json:"memory_gb"`
	PricePerHour float64 `json:"price_per_hour"`
	Spot         bool    `json:"spot"`
	DiskGB       int     `json:"disk_gb"`
	Availability string  `json:"availability"`
	Host         string  `json:"host"`
	FlexStart    bool    `json:"flex_start"`
}

type wireInstance struct {
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	Labels        map[string]string `json:"labels"`
	OfferID       string            `json:"offer_id"`
	Region        string            `json:"region"`
	Zone          string            `json:"zone"`
	InstanceType  string            `json:"instance_type"`
	Status        string            `json:"status"`
	StatusMessage string            `json:"status_message"`
	SSH           *struct {
		Host string `json:"host"`
		Port int    `json:"port"`
		User string `json:"user"`
	} `json:"ssh"`
	PublicIP     string      `json:"public_ip"`
	HostID       string      `json:"host_id"`
	CreatedAt    time.Time   `json:"created_at"`
	TerminatedAt time.Time   `json:"terminated_at"`
	Events       []wireEvent `json:"events"`
}

type wireEvent struct {
	At      time.Time `json:"at"`
	Type    string    `json:"type"`
	Message string    `json:"message"`
}

type wireCreate struct {
	OfferID          string            `json:"offer_id"`
	Name             string            `json:"name"`
	Labels           map[string]string `json:"labels"`
	UserData         string            `json:"user_data,omitempty"`
	IdempotencyToken string            `json:"idempotency_token,omitempty"`
	SSHUser          string            `json:"ssh_user,omitempty"`
	SSHKey           string            `json:"ssh_key,omitempty"`
	Firewall         string            `json:"firewall,omitempty"`
	DiskGB           int               `json:"disk_gb,omitempty"`
	PlacementGroup   string            `json:"placement_group,omitempty"`
	ReservationID    string            `json:"reservation_id,omitempty"`
	MaxRunSeconds    int               `json:"max_run_seconds,omitempty"`
}

// wireReservation is a reservation of GET reservations.
type wireReservation struct {
	ID       string    `json:"id"`
	OfferID  string    `json:"offer_id"`
	Count    int       `json:"count"`
	InUse    int       `json:"in_use"`
	Targeted bool      `json:"targeted"`
	EndsAt   time.Time `json:"ends_at"`
	Reclaims string    `json:"reclaims"` // a Go duration
	State    string    `json:"state"`
}

// wireQuota is a quota of GET quotas.
type wireQuota struct {
	Name   string `json:"name"`
	Region string `json:"region"`
	GPU    string `json:"gpu"`
	Limit  int    `json:"limit"`
	Usage  int    `json:"usage"`
}

type wirePlacementGroup struct {
	Labels map[string]string `json:"labels"`
}

type wirePort struct {
	Number   int    `json:"number"`
	Protocol string `json:"protocol"`
	Peers    bool   `json:"peers,omitempty"` // also open to the firewall's own instances
}

type wireFirewall struct {
	Ports   []wirePort        `json:"ports"`
	Sources []string          `json:"sources"`
	Labels  map[string]string `json:"labels"`
}

// wireFirewallView is a firewall as GET firewalls lists it.
type wireFirewallView struct {
	Name   string            `json:"name"`
	Region string            `json:"region"`
	Labels map[string]string `json:"labels"`
}

type wireSSHKey struct {
	PublicKeys []string          `json:"public_keys"`
	Labels     map[string]string `json:"labels"`
}

type wireError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// call is one API request.
type call struct {
	op     string // the primitive, for errors: "plan", "create", ...
	method string
	path   string // below /clouds/{cloud}/v1/
	query  url.Values
	in     any // JSON body
	out    any // decoded from a 2xx answer
}

// do sends c once and returns nil for a 2xx answer, else a *provider.Error
// classified by classify (wrapping an *APIError for an error answer). Every
// failure to get an answer is Transient: the call may have taken effect.
func (p *Provider) do(ctx context.Context, c call) error {
	if p.turn != nil {
		if err := p.turn(ctx); err != nil {
			if provider.KindOf(err) == provider.Capacity {
				return err // the core's pacer: the offer was blocked meanwhile
			}
			return &provider.Error{Kind: provider.Transient, Provider: p.name, Op: c.op,
				Err: fmt.Errorf("%s %s: pacing: %w", c.method, c.path, err)}
		}
	} else if p.lim != nil {
		now := p.clk.Now()
		r := p.lim.ReserveN(now, 1)
		if err := p.clk.Sleep(ctx, r.DelayFrom(now)); err != nil {
			r.CancelAt(p.clk.Now())
			return &provider.Error{Kind: provider.Transient, Provider: p.name, Op: c.op,
				Err: fmt.Errorf("%s %s: pacing: %w", c.method, c.path, err)}
		}
	}
	start := time.Now()
	_, err := p.api.Do(ctx, rest.Request{Method: c.method, Path: "/" + c.path, Query: c.query, Body: c.in, Out: c.out})
	p.log.Debug("sim: request", "provider", p.name, "method", c.method, "path", c.path,
		"status", rest.StatusOf(err), "duration", time.Since(start), "err", err)
	var re *rest.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &re):
		return classify(p.name, c.op, parseAPIError(re))
	}
	return &provider.Error{Kind: provider.Transient, Provider: p.name, Op: c.op, Err: err}
}

// parseAPIError reads an error answer: the JSON error body when there is
// one, and the Retry-After the rest client parsed.
func parseAPIError(re *rest.Error) *APIError {
	e := &APIError{Status: re.Status, RetryAfter: re.RetryAfter}
	var w wireError
	if json.Unmarshal(re.Body, &w) == nil {
		e.Code, e.Message = w.Error.Code, w.Error.Message
	}
	if e.Message == "" {
		e.Message = http.StatusText(re.Status)
	}
	return e
}
