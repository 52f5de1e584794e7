package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/org/gpuprov/provider"
)

// noticeLead is the notice the simulated cloud's preempt_notice fault
// gives by default (the admin API's ?notice= sets another).
const noticeLead = 30 * time.Second

// NoticeProbe implements provider.NoticeWatcher: the machine reads its
// metadata endpoint (GPUPROV_SIM_METADATA in its sandbox; see
// simserver's "Interruption notices"), which answers 200 with
// {"action": "terminate", "time": RFC 3339} while a preemption is
// announced and 404 otherwise, as AWS's spot/instance-action does. Spot
// instances only: the simulated cloud preempts nothing else.
func (p *Provider) NoticeProbe(t provider.NoticeTarget) (provider.NoticeProbe, bool) {
	if !t.Spot {
		return provider.NoticeProbe{}, false
	}
	return provider.NoticeProbe{
		// -f: a 404 prints nothing.
		Command: `curl -sf --max-time 2 "$GPUPROV_SIM_METADATA/interruption"`,
		Lead:    noticeLead,
		Parse:   parseNotice,
	}, true
}

// parseNotice reads the metadata endpoint's answer.
func parseNotice(out []byte) ([]provider.Notice, error) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return nil, nil
	}
	var n struct {
		Action string    `json:"action"`
		Time   time.Time `json:"time"`
	}
	if err := json.Unmarshal(out, &n); err != nil {
		return nil, fmt.Errorf("sim: interruption notice %.80q: %w", out, err)
	}
	if n.Action == "" || n.Time.IsZero() {
		return nil, fmt.Errorf("sim: interruption notice %.80q: want an action and a time", out)
	}
	return []provider.Notice{{Kind: provider.NoticePreempt, At: n.Time, Detail: "action " + n.Action}}, nil
}
