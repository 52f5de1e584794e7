package gcp

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/org/gpuprov/provider"
)

// A compact cluster's placement group is a compact placement policy: a
// regional resource policy named gpuprov-<cluster> whose
// groupPlacementPolicy.collocation is COLLOCATED. Instances name it in
// their resourcePolicies at insert, and Compute Engine places them close
// together in their zone.
//
// Resource policies take no labels (the compute v1 ResourcePolicy schema
// has no labels field), so the policy carries its identity in its
// description instead: "gpuprov compact placement policy
// gpuprov-installation=<id> gpuprov-cluster=<cluster>". The caller's labels
// cannot be carried and are not.

const (
	opEnsurePolicy = "ensure-placement-group"
	opDeletePolicy = "delete-placement-group"
	collocated     = "COLLOCATED"
)

// policyNameRE is the pattern of a resource policy's name (RFC 1035, as
// ResourcePolicy.name in the discovery document).
var policyNameRE = regexp.MustCompile(`^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$`)

// compactSeries are the machine series that take a compact placement
// policy among those with GPUs: A4X, A4, A3 (Ultra, Mega, High, Edge), A2,
// G4 and G2 (https://cloud.google.com/ai-hypercomputer/docs/placement-policy-and-workload-policy,
// "Supported machine types"). N1 with attached T4 or V100 GPUs does not.
var compactSeries = []string{"a4x", "a4", "a3", "a2", "g4", "g2"}

// compactSupported reports whether machineType's series takes a compact
// placement policy.
func compactSupported(machineType string) bool {
	series, _, _ := strings.Cut(machineType, "-")
	return slices.Contains(compactSeries, series)
}

// checkCompact refuses, before anything is created, an offer whose
// machine series cannot be placed compactly: Unavailable, so the launch
// moves on to an offer that can.
func (p *Provider) checkCompact(op string, offer *provider.Offer, machineType string) error {
	if compactSupported(machineType) {
		return nil
	}
	return p.errorf(provider.Unavailable, op,
		"machine type %s (offer %s) does not support compact placement policies (series %v do)",
		machineType, offer.Key(), compactSeries)
}

// regionOf is loc's region, or the region of its zone.
func regionOf(loc provider.Location) string {
	if loc.Region != "" {
		return loc.Region
	}
	if i := strings.LastIndexByte(loc.Zone, '-'); i > 0 {
		return loc.Zone[:i]
	}
	return ""
}

// policyPath is the resource path an instance names the policy by.
func (p *Provider) policyPath(region, name string) string {
	return "projects/" + p.cfg.Project + "/regions/" + region + "/resourcePolicies/" + name
}

// policyArgs validates a placement group's location and name and returns
// the region.
func (p *Provider) policyArgs(op string, loc provider.Location, name string) (string, error) {
	region := regionOf(loc)
	if !regionRE.MatchString(region) {
		return "", p.errorf(provider.InvalidRequest, op, "placement group %q: location %q names no region", name, loc)
	}
	if !policyNameRE.MatchString(name) {
		return "", p.errorf(provider.InvalidRequest, op,
			"placement group %q: a resource policy name is 1-63 lowercase letters, digits or -, starting with a letter", name)
	}
	return region, nil
}

// policyDescription is the identity a policy carries: the installation
// (always this provider's) and the cluster of labels.
func (p *Provider) policyDescription(labels map[string]string) string {
	d := "gpuprov compact placement policy " + provider.LabelInstallation + "=" + p.installation
	if c := labels[provider.LabelCluster]; c != "" {
		d += " " + provider.LabelCluster + "=" + c
	}
	return d
}

// oursPolicy reports whether rp is a compact placement policy of this
// installation.
func (p *Provider) oursPolicy(rp *computepb.ResourcePolicy) bool {
	return rp.GetGroupPlacementPolicy().GetCollocation() == collocated &&
		slices.Contains(strings.Fields(rp.GetDescription()), provider.LabelInstallation+"="+p.installation)
}

// EnsurePlacementGroup implements provider.PlacementGrouper: it inserts the
// compact placement policy name in loc's region (resourcePolicies.insert,
// groupPlacementPolicy.collocation COLLOCATED, the identity in the
// description) and waits for the regional operation, bounded by
// OperationTimeout; an operation still running when the wait runs out was
// accepted and is success. A policy of that name that exists (409
// alreadyExists, or the operation's RESOURCE_ALREADY_EXISTS) is read and
// adopted when it is a compact placement policy of this installation; any
// other policy of the name is Unavailable, blocking the region (nothing
// was created, another region may take the cluster).
//
// vmCount is left unset: Compute Engine then places any number of
// instances (the core adds nodes one at a time and replaces failed ones),
// while a policy with a vmCount works only once it holds exactly that many.
func (p *Provider) EnsurePlacementGroup(ctx context.Context, loc provider.Location, name string, labels map[string]string) error {
	region, err := p.policyArgs(opEnsurePolicy, loc, name)
	if err != nil {
		return err
	}
	rp := &computepb.ResourcePolicy{
		Name:                 proto(name),
		Description:          proto(p.policyDescription(labels)),
		GroupPlacementPolicy: &computepb.ResourcePolicyGroupPlacementPolicy{Collocation: proto(collocated)},
	}
	cctx, cancel := p.call(ctx)
	op, err := p.policies.Insert(cctx, &computepb.InsertResourcePolicyRequest{
		Project: p.cfg.Project, Region: region, ResourcePolicyResource: rp,
	}, noRetry)
	cancel()
	switch {
	case err != nil && isAlreadyExists(err):
		return p.adoptPolicy(ctx, region, name)
	case err != nil:
		return p.classify(opEnsurePolicy, err)
	}
	oe, werr := p.wait(ctx, op)
	switch {
	case oe != nil && IsCode(oe, "RESOURCE_ALREADY_EXISTS"):
		return p.adoptPolicy(ctx, region, name)
	case oe != nil:
		return p.classifyOp(opEnsurePolicy, oe)
	case werr != nil && !p.stillRunning(ctx, werr):
		return p.classify(opEnsurePolicy, werr)
	}
	p.log.Info("gcp: compact placement policy created", "provider", p.name, "region", region, "policy", name)
	return nil
}

// adoptPolicy reads the existing policy name and accepts it if it is ours.
func (p *Provider) adoptPolicy(ctx context.Context, region, name string) error {
	rp, err := p.getPolicy(ctx, region, name)
	if err != nil {
		return p.classify(opEnsurePolicy, err)
	}
	if !p.oursPolicy(rp) {
		pe := p.errorf(provider.Unavailable, opEnsurePolicy,
			"resource policy %s in %s exists and is not a compact placement policy of installation %s",
			name, region, p.installation)
		pe.Block = provider.ScopeRegion
		return pe
	}
	p.log.Debug("gcp: compact placement policy exists; adopted", "provider", p.name, "region", region, "policy", name)
	return nil
}

func (p *Provider) getPolicy(ctx context.Context, region, name string) (*computepb.ResourcePolicy, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	return p.policies.Get(cctx, &computepb.GetResourcePolicyRequest{Project: p.cfg.Project, Region: region, ResourcePolicy: name}, noRetry)
}

// DeletePlacementGroup implements provider.PlacementGrouper: it reads the
// policy name in loc's region (resourcePolicies.get) and, when it is a
// compact placement policy of this installation, deletes it
// (resourcePolicies.delete) and waits for the regional operation, bounded
// by OperationTimeout. A policy that is gone (404, or the operation's
// RESOURCE_NOT_FOUND) is success, and so is a delete still running when
// the wait runs out. A policy that instances still name (HTTP 400 reason
// resourceInUseByAnotherResource, or the operation's
// RESOURCE_IN_USE_BY_ANOTHER_RESOURCE: instances still being deleted hold
// it) is a Transient error matching provider.ErrInUse. A policy of that
// name that is not ours is left alone, and reported as a Failed error.
// Other errors are classified as every call's are.
func (p *Provider) DeletePlacementGroup(ctx context.Context, loc provider.Location, name string) error {
	region, err := p.policyArgs(opDeletePolicy, loc, name)
	if err != nil {
		return err
	}
	rp, err := p.getPolicy(ctx, region, name)
	switch {
	case err != nil && isNotFound(err):
		return nil
	case err != nil:
		return p.classify(opDeletePolicy, err)
	case !p.oursPolicy(rp):
		return p.errorf(provider.Failed, opDeletePolicy,
			"resource policy %s in %s is not a compact placement policy of installation %s; left in place",
			name, region, p.installation)
	}
	cctx, cancel := p.call(ctx)
	op, err := p.policies.Delete(cctx, &computepb.DeleteResourcePolicyRequest{
		Project: p.cfg.Project, Region: region, ResourcePolicy: name,
	}, noRetry)
	cancel()
	switch {
	case err != nil && isNotFound(err):
		return nil
	case err != nil && hasReason(err, "resourceInUseByAnotherResource"):
		return inUse(p.classify(opDeletePolicy, err), region, name)
	case err != nil:
		return p.classify(opDeletePolicy, err)
	}
	oe, werr := p.wait(ctx, op)
	switch {
	case oe != nil && IsCode(oe, "RESOURCE_NOT_FOUND"):
		return nil
	case oe != nil && IsCode(oe, "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE"):
		return inUse(p.classifyOp(opDeletePolicy, oe), region, name)
	case oe != nil:
		return p.classifyOp(opDeletePolicy, oe)
	case werr != nil && !p.stillRunning(ctx, werr):
		return p.classify(opDeletePolicy, werr)
	}
	p.log.Info("gcp: compact placement policy deleted", "provider", p.name, "region", region, "policy", name)
	return nil
}

// inUse makes a classified (and sealed) error match provider.ErrInUse. It
// wraps after sealing: a masked error does not unwrap, ErrInUse must
// survive it.
func inUse(pe *provider.Error, region, name string) *provider.Error {
	pe.Err = fmt.Errorf("resource policy %s in %s is %w by instances: %w", name, region, provider.ErrInUse, pe.Err)
	return pe
}
