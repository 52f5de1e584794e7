package simserver

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"golang.org/x/time/rate"
)

// Faults are the failures a cloud injects. The zero value injects none.
// Lists of offer ids or regions accept "*" for all. Probabilities are in
// [0, 1] and drawn from the server's seeded generator.
type Faults struct {
	// StockoutOffers and StockoutRegions make creates of those offers, or
	// in those regions, fail with 409 out_of_capacity.
	StockoutOffers  []string `json:"stockout_offers,omitempty" toml:"stockout_offers,omitempty"`
	StockoutRegions []string `json:"stockout_regions,omitempty" toml:"stockout_regions,omitempty"`
	// OfferStock gives offers a finite stock: once an offer has that many
	// instances that are not terminated, its creates fail with 409
	// out_of_capacity (and its listing says none) until one goes.
	OfferStock map[string]int `json:"offer_stock,omitempty" toml:"offer_stock,omitempty"`
	// QuotaRegions make creates in those regions fail with 403
	// quota_exceeded; InstanceQuota (when > 0) does so once a region holds
	// that many instances that are not terminated.
	QuotaRegions  []string `json:"quota_regions,omitempty" toml:"quota_regions,omitempty"`
	InstanceQuota int      `json:"instance_quota,omitempty" toml:"instance_quota,omitempty"`
	// InsufficientFunds makes every create fail with 402 insufficient_funds.
	InsufficientFunds bool `json:"insufficient_funds,omitempty" toml:"insufficient_funds,omitempty"`

	// ThrottleRate is the probability that a call is answered 429
	// rate_limited with a Retry-After of RetryAfter (default 1s; the
	// header carries whole seconds, rounded up).
	ThrottleRate float64  `json:"throttle_rate,omitempty" toml:"throttle_rate,omitempty"`
	RetryAfter   Duration `json:"retry_after,omitempty" toml:"retry_after,omitempty"`
	// ErrorRate is the probability that a call fails with 500 internal or
	// 503 unavailable (evenly) before doing anything.
	ErrorRate float64 `json:"error_rate,omitempty" toml:"error_rate,omitempty"`
	// TimeoutRate is the probability that a call is held, doing nothing,
	// until the client gives up (or TimeoutHold passes, default 60s, and it
	// is answered 504 timeout).
	TimeoutRate float64  `json:"timeout_rate,omitempty" toml:"timeout_rate,omitempty"`
	TimeoutHold Duration `json:"timeout_hold,omitempty" toml:"timeout_hold,omitempty"`
	// Ops restricts ThrottleRate, ErrorRate and TimeoutRate to these call
	// kinds (see Stats); empty means every call.
	Ops []string `json:"ops,omitempty" toml:"ops,omitempty"`

	// LostCreateRate is the probability that a create lands (the instance
	// exists and boots) but its response is lost: LostCreateMode "error"
	// (the default) answers 500 internal, "drop" closes the connection.
	LostCreateRate float64 `json:"lost_create_rate,omitempty" toml:"lost_create_rate,omitempty"`
	LostCreateMode string  `json:"lost_create_mode,omitempty" toml:"lost_create_mode,omitempty"`
	// BootFailureRate is the probability that a new instance ends "failed"
	// instead of "running"; BootFailOffers and BootFailRegions fail every
	// boot there.
	BootFailureRate float64  `json:"boot_failure_rate,omitempty" toml:"boot_failure_rate,omitempty"`
	BootFailOffers  []string `json:"boot_fail_offers,omitempty" toml:"boot_fail_offers,omitempty"`
	BootFailRegions []string `json:"boot_fail_regions,omitempty" toml:"boot_fail_regions,omitempty"`
	// SlowDelete is added to Timing.DeleteTime: a deleted instance stays
	// "stopping" that much longer.
	SlowDelete Duration `json:"slow_delete,omitempty" toml:"slow_delete,omitempty"`
	// ListingLag hides a new instance from GET instances (not from
	// GET instances/{id}) for that long after its creation.
	ListingLag Duration `json:"listing_lag,omitempty" toml:"listing_lag,omitempty"`
	// PreemptionRate is the probability that a new instance is preempted
	// at a uniformly drawn time within PreemptWithin (default 10s) of
	// turning running. Server.Preempt and the admin API preempt on demand.
	PreemptionRate float64  `json:"preemption_rate,omitempty" toml:"preemption_rate,omitempty"`
	PreemptWithin  Duration `json:"preempt_within,omitempty" toml:"preempt_within,omitempty"`
	// PreemptNotice announces each preemption PreemptionRate draws this long
	// ahead on the instance's metadata endpoint (GET /metadata/{cloud}/{id}/
	// interruption), as a cloud's interruption notice does; zero: none.
	PreemptNotice Duration `json:"preempt_notice,omitempty" toml:"preempt_notice,omitempty"`
	// RateLimit (requests per second) and RateBurst size a token bucket per
	// account; a call that finds it empty is answered 429 rate_limited with
	// the Retry-After of the next token. Zero means no limit.
	RateLimit float64 `json:"rate_limit,omitempty" toml:"rate_limit,omitempty"`
	RateBurst int     `json:"rate_burst,omitempty" toml:"rate_burst,omitempty"`
	// VolumeStockoutZones make volume creates in those zones fail with
	// 409 out_of_capacity.
	VolumeStockoutZones []string `json:"volume_stockout_zones,omitempty" toml:"volume_stockout_zones,omitempty"`
	// GPUFaults break the GPUs of new instances as their own tools
	// (nvidia-smi, lspci, dmesg) show it: see GPUFault.
	GPUFaults []GPUFault `json:"gpu_faults,omitempty" toml:"gpu_faults,omitempty"`
}

// validate checks probabilities and modes.
func (f Faults) validate() error {
	for name, p := range map[string]float64{
		"throttle_rate": f.ThrottleRate, "error_rate": f.ErrorRate, "timeout_rate": f.TimeoutRate,
		"lost_create_rate": f.LostCreateRate, "boot_failure_rate": f.BootFailureRate, "preemption_rate": f.PreemptionRate,
	} {
		if p < 0 || p > 1 || math.IsNaN(p) {
			return fmt.Errorf("simserver: fault %s = %v is not a probability", name, p)
		}
	}
	switch f.LostCreateMode {
	case "", "error", "drop":
	default:
		return fmt.Errorf("simserver: lost_create_mode %q: want \"error\" or \"drop\"", f.LostCreateMode)
	}
	for _, g := range f.GPUFaults {
		if err := g.validate(); err != nil {
			return fmt.Errorf("simserver: %w", err)
		}
	}
	if f.RateLimit < 0 || f.RateBurst < 0 || f.InstanceQuota < 0 {
		return fmt.Errorf("simserver: negative rate_limit, rate_burst or instance_quota")
	}
	for id, n := range f.OfferStock {
		if n < 0 {
			return fmt.Errorf("simserver: offer_stock of %q is %d, not a count", id, n)
		}
	}
	return nil
}

// matches reports whether v is in list or list holds "*".
func matches(list []string, v string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, v)
}

func orDefault(d Duration, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d.Std()
}

// newLimiter returns the token bucket of f, or nil when it sets no limit.
func (f Faults) newLimiter() *rate.Limiter {
	if f.RateLimit <= 0 {
		return nil
	}
	burst := f.RateBurst
	if burst <= 0 {
		burst = max(1, int(math.Ceil(f.RateLimit)))
	}
	return rate.NewLimiter(rate.Limit(f.RateLimit), burst)
}

// chance draws from the cloud's generator; p <= 0 draws nothing, so that a
// fault that is off does not shift the sequence of the others.
func (c *cloud) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	return c.rnd.Float64() < p
}

// gate applies the per-call faults of c: the token bucket, then injected
// timeouts, 429s and 5xx. It returns the error to answer with, if any, and
// whether the call is to be held until the client gives up. The caller
// holds s.mu.
func (c *cloud) gate(kind string, now time.Time) (hold bool, err *apiError) {
	f := &c.faults
	if c.limiter != nil && !c.limiter.AllowN(now, 1) {
		r := c.limiter.ReserveN(now, 1)
		wait := time.Second
		if r.OK() {
			wait = r.DelayFrom(now)
			r.CancelAt(now)
		}
		c.stats.RateLimited++
		return false, &apiError{status: http.StatusTooManyRequests, code: CodeRateLimited,
			message: "API rate limit exceeded for this account", retryAfter: wait}
	}
	if len(f.Ops) > 0 && !slices.Contains(f.Ops, kind) {
		return false, nil
	}
	if c.chance(f.TimeoutRate) {
		c.stats.Timeouts++
		return true, nil
	}
	if c.chance(f.ThrottleRate) {
		c.stats.RateLimited++
		return false, &apiError{status: http.StatusTooManyRequests, code: CodeRateLimited,
			message: "too many requests", retryAfter: orDefault(f.RetryAfter, time.Second)}
	}
	if c.chance(f.ErrorRate) {
		if c.rnd.IntN(2) == 0 {
			return false, errorf(http.StatusInternalServerError, CodeInternal, "internal error, please retry")
		}
		return false, errorf(http.StatusServiceUnavailable, CodeUnavailable, "service temporarily unavailable")
	}
	return false, nil
}

// AvailabilityNone is an offer's Availability while a stockout fault covers
// it.
const AvailabilityNone = "none"

// stockedOut reports whether a stockout fault covers offer of, or its
// OfferStock is taken. The caller
// holds s.mu.
func (c *cloud) stockedOut(of *Offer) bool {
	if matches(c.faults.StockoutOffers, of.ID) || matches(c.faults.StockoutRegions, of.Region) {
		return true
	}
	stock, finite := c.faults.OfferStock[of.ID]
	if !finite {
		return false
	}
	n := 0
	for _, in := range c.instances {
		if in.OfferID == of.ID && in.Status != StatusTerminated {
			n++
		}
	}
	return n >= stock
}

// admit applies the create-time faults for offer: funds, quota, stockout.
// The caller holds s.mu.
func (c *cloud) admit(of *Offer) *apiError {
	f := &c.faults
	if f.InsufficientFunds {
		return errorf(http.StatusPaymentRequired, CodeInsufficientFunds, "account balance is insufficient to launch %s", of.InstanceType)
	}
	if matches(f.QuotaRegions, of.Region) {
		return errorf(http.StatusForbidden, CodeQuotaExceeded, "GPU quota exceeded in region %s", of.Region)
	}
	if f.InstanceQuota > 0 {
		n := 0
		for _, in := range c.instances {
			if in.Region == of.Region && in.Status != StatusTerminated {
				n++
			}
		}
		if n >= f.InstanceQuota {
			return errorf(http.StatusForbidden, CodeQuotaExceeded, "instance quota of %d reached in region %s", f.InstanceQuota, of.Region)
		}
	}
	if c.stockedOut(of) {
		return errorf(http.StatusConflict, CodeOutOfCapacity, "no capacity for %s in %s", of.InstanceType, of.Zone)
	}
	return nil
}

// retryAfterSeconds renders d as the Retry-After header: whole seconds,
// rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return fmt.Sprint(max(1, int64(math.Ceil(d.Seconds()))))
}
