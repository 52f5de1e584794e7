package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/hashicorp/go-retryablehttp"

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
	Availability string  `json:"availability"`
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
}

type wirePort struct {
	Number   int    `json:"number"`
	Protocol string `json:"protocol"`
}

type wireFirewall struct {
	Ports  []wirePort        `json:"ports"`
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
// classified by classify (wrapping an *APIError for an error answer).
func (p *Provider) do(ctx context.Context, c call) error {
	u := p.base + c.path
	if len(c.query) > 0 {
		u += "?" + c.query.Encode()
	}
	var body any
	if c.in != nil {
		b, err := json.Marshal(c.in)
		if err != nil {
			return provider.Errorf(provider.Failed, p.name, c.op, "encode %s %s: %w", c.method, c.path, err)
		}
		body = b
	}
	if p.lim != nil {
		// Every request takes a token, not every primitive: Cleanup, a
		// listing of several pages or a Delete of several ids make more
		// than one request for the one token the core's bucket took.
		if err := p.lim.Wait(ctx); err != nil {
			return &provider.Error{Kind: provider.Transient, Provider: p.name, Op: c.op,
				Err: fmt.Errorf("%s %s: pacing: %w", c.method, c.path, err)}
		}
	}
	rctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	req, err := retryablehttp.NewRequestWithContext(rctx, c.method, u, body)
	if err != nil {
		return provider.Errorf(provider.Failed, p.name, c.op, "%s %s: %w", c.method, c.path, err)
	}
	req.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := p.http.Do(req)
	if err != nil {
		p.log.Debug("sim: request failed", "provider", p.name, "method", c.method, "path", c.path, "err", err)
		switch {
		case ctx.Err() != nil: // the caller's own cancellation or deadline
			return &provider.Error{Kind: provider.Transient, Provider: p.name, Op: c.op,
				Err: fmt.Errorf("%s %s: %w", c.method, c.path, context.Cause(ctx))}
		case rctx.Err() != nil: // our per-call timeout: not the caller's deadline
			return &provider.Error{Kind: provider.Transient, Provider: p.name, Op: c.op,
				Err: fmt.Errorf("%s %s: %w after %s", c.method, c.path, ErrRequestTimeout, p.cfg.RequestTimeout)}
		}
		return &provider.Error{Kind: provider.Transient, Provider: p.name, Op: c.op,
			Err: fmt.Errorf("%s %s: %w", c.method, c.path, err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	p.log.Debug("sim: request", "provider", p.name, "method", c.method, "path", c.path,
		"status", resp.StatusCode, "duration", time.Since(start))
	if err != nil {
		return &provider.Error{Kind: provider.Transient, Provider: p.name, Op: c.op,
			Err: fmt.Errorf("%s %s: reading the answer: %w", c.method, c.path, err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return classify(p.name, c.op, parseAPIError(resp, b))
	}
	if c.out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, c.out); err != nil {
			return provider.Errorf(provider.Failed, p.name, c.op, "%s %s: decode answer: %w", c.method, c.path, err)
		}
	}
	return nil
}

// parseAPIError reads an error answer: the JSON error body when there is
// one, and the Retry-After header (seconds or an HTTP date).
func parseAPIError(resp *http.Response, body []byte) *APIError {
	e := &APIError{Status: resp.StatusCode}
	var w wireError
	if json.Unmarshal(body, &w) == nil {
		e.Code, e.Message = w.Error.Code, w.Error.Message
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		var secs int
		if _, err := fmt.Sscanf(ra, "%d", &secs); err == nil && secs >= 0 {
			e.RetryAfter = time.Duration(secs) * time.Second
		} else if t, err := http.ParseTime(ra); err == nil {
			e.RetryAfter = max(0, time.Until(t))
		}
	}
	return e
}
