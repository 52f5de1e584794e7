package gcp

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp/internal/catalog"
)

// Observe lists the instances in loc that carry both identity labels of vm
// (instances.list in loc's zone, or aggregatedList narrowed to loc's
// region when loc has no zone), every page, and normalizes their status.
// TERMINATED (stopped) instances are listed too, as Failed: they still
// hold disks and an IP.
func (p *Provider) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	filter := fmt.Sprintf(`(labels.%s = "%s") AND (labels.%s = "%s")`, provider.LabelVM, vm, provider.LabelInstallation, p.installation)
	ins, err := p.list(ctx, "observe", loc, filter)
	if err != nil {
		return nil, err
	}
	out := []provider.Observed{}
	for _, in := range ins {
		if p.ours(in, vm) {
			out = append(out, observed(in))
		}
	}
	return out, nil
}

// List returns every instance of this installation that carries a VM
// label: in loc, or in every configured region (all regions when none is
// configured) when loc is zero. One aggregated call, all pages.
func (p *Provider) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	filter := fmt.Sprintf(`labels.%s = "%s"`, provider.LabelInstallation, p.installation)
	ins, err := p.list(ctx, "list", loc, filter)
	if err != nil {
		return nil, err
	}
	allowed := p.allowedRegions()
	out := []provider.Observed{}
	for _, in := range ins {
		l := in.GetLabels()
		if l[provider.LabelInstallation] != p.installation || l[provider.LabelVM] == "" {
			continue
		}
		o := observed(in)
		if loc.IsZero() && len(allowed) > 0 && !slices.Contains(allowed, o.Location.Region) {
			continue
		}
		out = append(out, o)
	}
	return out, nil
}

// list runs instances.list in loc.Zone, or instances.aggregatedList
// narrowed to loc.Region (or unnarrowed), with filter.
func (p *Provider) list(ctx context.Context, op string, loc provider.Location, filter string) ([]*computepb.Instance, error) {
	ctx, cancel := p.call(ctx)
	defer cancel()
	var out []*computepb.Instance
	if loc.Zone != "" {
		it := p.instances.List(ctx, &computepb.ListInstancesRequest{Project: p.cfg.Project, Zone: loc.Zone, Filter: proto(filter)}, noRetry)
		for {
			in, err := it.Next()
			if err == iterator.Done {
				return out, nil
			}
			if err != nil {
				return nil, p.classify(op, err)
			}
			out = append(out, in)
		}
	}
	it := p.instances.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{
		Project: p.cfg.Project, Filter: proto(filter),
	}, noRetry)
	for {
		pair, err := it.Next()
		if err == iterator.Done {
			return out, nil
		}
		if err != nil {
			return nil, p.classify(op, err)
		}
		for _, in := range pair.Value.GetInstances() {
			if loc.Region == "" || catalog.RegionOf(lastSegment(in.GetZone())) == loc.Region {
				out = append(out, in)
			}
		}
	}
}

// observed normalizes an instance. The SSH endpoint is set once it runs
// with an external IP: port 22, the user of its ssh-keys metadata.
func observed(in *computepb.Instance) provider.Observed {
	zone := lastSegment(in.GetZone())
	o := provider.Observed{
		ID: strconv.FormatUint(in.GetId(), 10), VM: in.GetLabels()[provider.LabelVM],
		Status: status(in.GetStatus()), VendorStatus: in.GetStatus(), Queued: queued(in),
		Location:     provider.Location{Region: catalog.RegionOf(zone), Zone: zone},
		InstanceType: lastSegment(in.GetMachineType()),
	}
	if t, err := time.Parse(time.RFC3339, in.GetCreationTimestamp()); err == nil {
		o.Created = t
	}
	if nics := in.GetNetworkInterfaces(); len(nics) > 0 {
		o.PrivateIP = nics[0].GetNetworkIP()
		if acs := nics[0].GetAccessConfigs(); len(acs) > 0 {
			o.PublicIP = acs[0].GetNatIP()
		}
	}
	if o.Status == provider.StatusRunning && o.PublicIP != "" {
		o.SSH = &provider.SSHEndpoint{Host: o.PublicIP, Port: 22, User: sshUser(in)}
	}
	return o
}

// sshUser is the user of the first ssh-keys metadata line ("user:key").
func sshUser(in *computepb.Instance) string {
	for _, it := range in.GetMetadata().GetItems() {
		if it.GetKey() != "ssh-keys" {
			continue
		}
		line, _, _ := strings.Cut(it.GetValue(), "\n")
		if u, _, ok := strings.Cut(line, ":"); ok {
			return u
		}
	}
	return ""
}

// queued reports whether in waits for capacity: status PENDING, which
// the discovery document's Instance.status enum gives to a Flex-start VM
// "waiting for available capacity from Dynamic Workload Scheduler (DWS)"
// and to nothing else. PROVISIONING ("Resources are being allocated") is
// past the queue: the VM is booting.
func queued(in *computepb.Instance) bool { return in.GetStatus() == "PENDING" }

// status maps a GCE instance status: PROVISIONING/STAGING/PENDING are
// Pending; RUNNING Running; STOPPING/SUSPENDING/PENDING_STOP/DEPROVISIONING
// Stopping (a deleted instance passes through STOPPING); TERMINATED,
// STOPPED, SUSPENDED and REPAIRING are Failed: the VM exists (and bills its
// disks) but does not run, which for a GPU VM means preempted, host error
// or maintenance.
func status(s string) provider.InstanceStatus {
	switch s {
	case "PROVISIONING", "STAGING", "PENDING":
		return provider.StatusPending
	case "RUNNING":
		return provider.StatusRunning
	case "STOPPING", "SUSPENDING", "PENDING_STOP", "DEPROVISIONING":
		return provider.StatusStopping
	case "TERMINATED", "STOPPED", "SUSPENDED", "REPAIRING":
		return provider.StatusFailed
	}
	return provider.StatusUnknown
}

// Delete requests the deletion of each id (one instances.delete per id,
// not waited for). An id is the numeric instance id: the instance
// gpuprov-<vm> in loc's zone is read first and deleted only if it still is
// that id, so a stale id never deletes a newer instance of the same name.
// A missing instance (404) is success. It tries every id and returns the
// first error.
func (p *Provider) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	if loc.Zone == "" {
		return p.errorf(provider.InvalidRequest, "delete", "location %s has no zone", loc)
	}
	name := provider.ResourceName(vm)
	var first error
	for _, id := range ids {
		if err := p.delete(ctx, loc.Zone, name, id); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (p *Provider) delete(ctx context.Context, zone, name, id string) error {
	if id != name {
		in, err := p.get(ctx, zone, name)
		if isNotFound(err) {
			return nil
		}
		if err != nil {
			return p.classify("delete", err)
		}
		if strconv.FormatUint(in.GetId(), 10) != id {
			return nil // that instance is gone; this is a newer one of the same name
		}
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	_, err := p.instances.Delete(cctx, &computepb.DeleteInstanceRequest{Project: p.cfg.Project, Zone: zone, Instance: name}, noRetry)
	if err != nil && !isNotFound(err) {
		return p.classify("delete", err)
	}
	return nil
}
