package gpuprov

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/org/gpuprov/gpu"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// How long a machine that failed GPU acceptance stays out of plans (see
// WithAcceptanceBlocks).
const (
	DefaultAcceptanceHostBlock  = 72 * time.Hour
	DefaultAcceptanceOfferBlock = 30 * time.Minute
)

// acceptance is the Provisioner's GPU acceptance setting.
type acceptance struct {
	set, on               bool // set: WithAcceptance or WithoutAcceptance was given
	opts                  gpu.Options
	hostBlock, offerBlock time.Duration
}

// accepts reports whether d's launch runs the acceptance phase.
func (d *driver) accepts() bool { return d.p.accept.on && !d.req.Acceptance.Skip }

// accept runs the GPU acceptance phase on the connected machine: one SSH
// command runs the probe (gpu.Script), one more runs DCGM's diagnostic
// where the request asks for it, one more the request's own command. The
// result is journaled on the attempt with an event that says it in one
// line. A machine that fails returns a *gpu.AcceptanceError (the driver
// tears it down, blocks it and goes on to the next offer); a probe that
// could not run or whose output is not the probe's returns another error
// (next offer, nothing blocked: the machine was not judged).
func (d *driver) accept(ctx context.Context, a *journal.Attempt) error {
	spec := d.req.Acceptance
	opts := d.p.accept.opts
	opts.Ignore = append(slices.Clip(opts.Ignore), spec.Ignore...)
	out, stderr, err := d.conn.Run(ctx, gpu.Script(gpu.ProbeOptions{}))
	if cerr := context.Cause(ctx); cerr != nil {
		return cerr // cut off: what came back judges nothing
	}
	if err != nil && len(out) == 0 {
		return fmt.Errorf("gpu probe did not run: %w%s", err, lastLine(stderr))
	}
	if spec.DCGM > 0 {
		dout, dstderr, err := d.conn.Run(ctx, gpu.DCGMScript(spec.DCGM))
		if err != nil && len(dout) == 0 {
			return fmt.Errorf("dcgm diagnostic did not run: %w%s", err, lastLine(dstderr))
		}
		out = append(out, dout...)
	}
	probe, err := gpu.Parse(out)
	if err != nil {
		return fmt.Errorf("gpu probe: %w", err)
	}
	want := d.offerGPU() // the alternative this attempt's offer is of
	rep := gpu.Check(probe, gpu.Expect{Model: want.GPU, Count: want.Count}, opts)
	if spec.Command != "" && rep.OK {
		cout, cerr, err := d.conn.Run(ctx, spec.Command)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			rep.Fail(gpu.Finding{Check: gpu.CheckCommand, Severity: provider.Critical, GPU: -1,
				Message: fmt.Sprintf("the request's acceptance command failed: %v%s", err, lastLine(append(cout, cerr...)))})
		}
	}
	doc, err := json.Marshal(rep)
	if err != nil {
		return fmt.Errorf("gpu acceptance: encode the result: %w", err)
	}
	a.Acceptance = doc
	typ := EvAccepted
	if !rep.OK {
		typ = EvRejected
	}
	if err := d.commit(ctx, &journal.Step{Update: &d.row, Attempts: []journal.Attempt{*a},
		Events: []journal.Event{d.event(typ, a, rep.Summary)}}); err != nil {
		return err
	}
	return rep.Err()
}

// acceptanceBlock is the block for a machine that failed acceptance on
// offer o: its host for days where the offer names one, else the offer
// (its type in its zone) for a short while.
func (p *Provisioner) acceptanceBlock(o *provider.Offer, cause error) journal.Block {
	scope, ttl := provider.ScopeHost, p.accept.hostBlock
	if o.Host == "" {
		scope, ttl = provider.ScopeOffer, p.accept.offerBlock
	}
	b := p.block(o, provider.Failed, scope, ttl, cause)
	b.ErrorKind = KindAccept
	return b
}

// isRejected reports whether err is a machine that failed GPU acceptance.
func isRejected(err error) bool {
	var ae *gpu.AcceptanceError
	return errors.As(err, &ae)
}

// lastLine returns ": " and the last non-empty line of out, bounded, or
// "" when there is none.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(bytes.ToValidUTF8(out, []byte("?")))), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if l == "" {
		return ""
	}
	if len(l) > 200 {
		l = l[:200] + "…"
	}
	return ": " + l
}
