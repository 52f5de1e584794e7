package provider

import "time"

// Billing is how a cloud bills an instance's time, as its pricing page
// says: from the create's acceptance until the instance is gone, rounded up
// to Increment, and never less than Minimum for an instance that was
// created at all. The core counts every attempt that billed this way,
// failed ones included (see docs/cost.md).
type Billing struct {
	// Increment is the unit billed time is rounded up to: a second (per
	// second), a minute, an hour. 0: per second.
	Increment time.Duration `json:"increment,omitempty"`
	// Minimum is the least time billed for an instance that was created.
	Minimum time.Duration `json:"minimum,omitempty"`
	// Free says the provider bills nothing for an instance's time (a
	// Kubernetes cluster the user pays for anyway).
	Free bool `json:"free,omitempty"`
	// Source is where the model is documented (the pricing page).
	Source string `json:"source,omitempty"`
}

// Billed is the time billed for an instance that ran d: d rounded up to
// the increment, at least the minimum (0 for a negative d).
func (b Billing) Billed(d time.Duration) time.Duration {
	if d < 0 || b.Free {
		return 0
	}
	inc := b.Increment
	if inc <= 0 {
		inc = time.Second
	}
	if r := d % inc; r != 0 {
		d += inc - r
	}
	return max(d, b.Minimum)
}

// Cost is what an instance that ran d at pricePerHour bills.
func (b Billing) Cost(d time.Duration, pricePerHour float64) float64 {
	return b.Billed(d).Hours() * pricePerHour
}
