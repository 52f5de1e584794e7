package gpuprov

import "time"

// DefaultRetention is how long the journal keeps the rows, attempts and
// events of a VM that ended (deleted or failed) before Prune removes them.
const DefaultRetention = 30 * 24 * time.Hour

// WithRetention sets how long Prune keeps what the journal holds of VMs
// that ended (default DefaultRetention).
func WithRetention(d time.Duration) Option { return func(p *Provisioner) { p.retention = d } }
