package gcp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/org/gpuprov/provider"
)

// prepared is what Prepare returns (journaled) and Create reads.
type prepared struct {
	Firewall string `json:"firewall"`
	Tag      string `json:"tag"`
	// SharedTag is the network tag of the installation's shared rule that
	// admits the VM's OpenPorts from its restricted sources and from its
	// peers (firewall.go); empty when the VM needs none.
	SharedTag string `json:"shared_tag,omitempty"`
	Network   string `json:"network"`
	Image     string `json:"image"`
}

// Prepare makes the VM's firewall rules on the network (firewall.go): its
// own rule gpuprov-<vm> (INGRESS tcp:22, and spec.OpenPorts unless its
// sources are restricted, from its sources, to instances tagged
// gpuprov-<vm>) and, when its sources are restricted and it opens ports,
// the installation's shared rule that admits those ports from the sources
// and from the instances of the same rule. It resolves the boot image (an
// image family to its current image). A rule that already exists is
// adopted, and replaced when it admits other sources or ports, so Prepare
// is idempotent. Firewall rules are global: one rule serves the VM in every
// zone. SSH keys go in the instance's own metadata at Create, never in
// project metadata. With spec.PlacementGroup, an offer whose machine series
// takes no compact placement policy (N1) is refused as Unavailable before
// anything is made.
func (p *Provider) Prepare(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (json.RawMessage, error) {
	if spec.PlacementGroup != "" {
		var d offerDetail
		if err := json.Unmarshal(offer.Detail, &d); err == nil && d.MachineType != "" {
			if err := p.checkCompact("prepare", offer, d.MachineType); err != nil {
				return nil, err
			}
		}
	}
	own, shared, err := p.firewallRules(spec)
	if err != nil {
		return nil, err
	}
	pr := prepared{Firewall: own.GetName(), Tag: own.GetName(), Network: p.networkPath()}
	if err := p.ensureFirewall(ctx, own); err != nil {
		return nil, err
	}
	if shared != nil {
		if err := p.ensureFirewall(ctx, shared); err != nil {
			return nil, err
		}
		pr.SharedTag = shared.GetName()
	}
	image := spec.Image
	if image == "" {
		image = p.cfg.Image
	}
	if pr.Image, err = p.resolveImage(ctx, image); err != nil {
		return nil, err
	}
	b, err := json.Marshal(pr)
	if err != nil {
		return nil, p.errorf(provider.Failed, "prepare", "encode: %w", err)
	}
	return b, nil
}

// networkPath renders Config.Network as a resource path.
func (p *Provider) networkPath() string {
	n := p.cfg.Network
	if strings.Contains(n, "/") {
		return n
	}
	return "projects/" + p.cfg.Project + "/global/networks/" + n
}

// subnetworkPath renders Config.Subnetwork in region, or "" for none.
func (p *Provider) subnetworkPath(region string) string {
	s := p.cfg.Subnetwork
	if s == "" || strings.Contains(s, "/") {
		return s
	}
	return "projects/" + p.cfg.Project + "/regions/" + region + "/subnetworks/" + s
}

// resolveImage turns projects/P/global/images/family/F into the family's
// current image; an image path is used as is. A family or image that does
// not exist is InvalidRequest.
func (p *Provider) resolveImage(ctx context.Context, image string) (string, error) {
	path := image
	if i := strings.Index(path, "/projects/"); strings.HasPrefix(path, "https://") && i >= 0 {
		path = path[i+1:]
	}
	parts := strings.Split(path, "/")
	if len(parts) == 6 && parts[0] == "projects" && parts[2] == "global" && parts[3] == "images" && parts[4] == "family" {
		cctx, cancel := p.call(ctx)
		defer cancel()
		img, err := p.images.GetFromFamily(cctx, &computepb.GetFromFamilyImageRequest{Project: parts[1], Family: parts[5]}, noRetry)
		if err != nil {
			pe := p.classify("prepare", err)
			if isNotFound(err) {
				pe.Kind = provider.InvalidRequest
			}
			return "", pe
		}
		if img.GetSelfLink() != "" {
			return img.GetSelfLink(), nil
		}
		return "projects/" + parts[1] + "/global/images/" + img.GetName(), nil
	}
	if len(parts) == 5 && parts[0] == "projects" && parts[2] == "global" && parts[3] == "images" {
		return image, nil
	}
	return "", p.errorf(provider.InvalidRequest, "prepare",
		"image %q: want projects/P/global/images/family/F or projects/P/global/images/I", image)
}

// Cleanup deletes the VM's firewall rule gpuprov-<vm>; a rule that is gone
// is success. It touches nothing else (disks auto-delete with the
// instance). A rule still in use by an instance being deleted is answered
// resourceInUseByAnotherResource, which is Transient.
func (p *Provider) Cleanup(ctx context.Context, loc provider.Location, vm string) error {
	name := provider.ResourceName(vm)
	cctx, cancel := p.call(ctx)
	op, err := p.firewalls.Delete(cctx, &computepb.DeleteFirewallRequest{Project: p.cfg.Project, Firewall: name}, noRetry)
	cancel()
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return p.classify("cleanup", err)
	}
	oe, werr := p.wait(ctx, op)
	if oe != nil {
		if IsCode(oe, "RESOURCE_NOT_FOUND") {
			return nil
		}
		return p.classifyOp("cleanup", oe)
	}
	if werr != nil && !p.stillRunning(ctx, werr) {
		return p.classify("cleanup", werr)
	}
	return nil
}

// wait waits for op, bounded by OperationTimeout, and then reads the
// operation's own error list, whether or not Wait failed: Wait reports a
// failed operation only as an HTTP status, the codes are on the operation.
func (p *Provider) wait(ctx context.Context, op *compute.Operation) (*OperationError, error) {
	wctx, cancel := context.WithTimeout(ctx, p.cfg.OperationTimeout)
	defer cancel()
	werr := op.Wait(wctx, noRetry)
	if oe := operationError(op.Proto()); oe != nil {
		return oe, nil
	}
	return nil, werr
}

// stillRunning reports whether werr only says that the bounded wait ran out
// while the caller's context is alive: the operation was accepted and is
// still running.
func (p *Provider) stillRunning(ctx context.Context, werr error) bool {
	return errors.Is(werr, context.DeadlineExceeded) && ctx.Err() == nil
}
