package gcp

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/uuid"

	"github.com/org/gpuprov/provider"
)

// requestNamespace is the UUIDv5 namespace of request ids derived from
// tokens that are not UUIDs themselves.
var requestNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/org/gpuprov/provider/gcp#requestId"))

// requestID is the insert's requestId: spec.IdempotencyToken when it is a
// non-zero UUID (the core derives a UUIDv5 from installation, VM and
// attempt), else a UUIDv5 derived from it deterministically, so a replay of
// the same attempt carries the same id and GCE ignores it (for at least 60
// minutes).
func requestID(spec *provider.InstanceSpec) string {
	if u, err := uuid.Parse(spec.IdempotencyToken); err == nil && u != uuid.Nil {
		return u.String()
	}
	seed := spec.IdempotencyToken
	if seed == "" {
		seed = spec.Installation + "/" + spec.VM + "/" + strconv.Itoa(spec.Attempt)
	}
	return uuid.NewSHA1(requestNamespace, []byte(seed)).String()
}

// Create sends one instances.insert named gpuprov-<vm>, labelled
// gpuprov=<vm> and gpuprov-installation=<installation>, tagged for the
// VM's firewall rule, with the requestId, the cloud-init user-data (which
// carries the injected host key) and the ssh-keys in the instance's
// metadata. GPU VMs terminate on host maintenance; Spot offers run as
// provisioningModel SPOT and are deleted when preempted; N1 shapes attach
// their GPUs as guestAccelerators. It then waits, bounded by
// OperationTimeout, for the insert operation and reads its error codes:
// ZONE_RESOURCE_POOL_EXHAUSTED is Capacity blocking the offer (that type in
// that zone), QUOTA_EXCEEDED Quota blocking what its metric counts (the GPU
// model's offers in the region, its Spot offers, the region, or the
// project for GPUS_ALL_REGIONS; see quotaScope). The instance carries the
// network tags Prepare's rules target. An
// insert answered alreadyExists adopts the instance if it carries this
// VM's labels. It returns the numeric instance id.
//
// With spec.PlacementGroup, the instance names the compact placement
// policy projects/P/regions/R/resourcePolicies/<group> of the offer's
// region (EnsurePlacementGroup made it) in its resourcePolicies. Compact
// placement takes only instances that terminate on host maintenance, as
// every GPU VM here does, and only the machine series of compactSeries: an
// N1 offer is refused as Unavailable before any call.
//
// A reservation offer launches into its reservation (reservationAffinity:
// by name when the reservation is targeted, ANY_RESERVATION when it is
// open); the offers of a request that forbids reserved capacity launch
// with NO_RESERVATION. A reservation that is full, gone, not READY or
// refuses the instance is Unavailable for that offer only (see
// reservationRefusal), never Capacity.
//
// A flex-start offer (Offer.MaxRunDuration) launches as a Flex-start VM:
// provisioningModel FLEX_START with the offer's maxRunDuration, deleted at
// its end, NO_RESERVATION, waiting up to two hours for capacity
// (params.requestValidForDuration; see flexstart.go). Its insert operation
// runs for as long as the request is queued, so Create does not wait for
// it: it reads it once (checkOnce), returns the error it already carries,
// if any, and else the instance id; Observe reports the queued VM as
// pending with Queued set.
func (p *Provider) Create(ctx context.Context, offer *provider.Offer, prep json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	var d offerDetail
	if err := json.Unmarshal(offer.Detail, &d); err != nil || d.MachineType == "" {
		return "", p.errorf(provider.InvalidRequest, "create", "offer has no machine type in its detail (%s)", offer.Detail)
	}
	var pr prepared
	if err := json.Unmarshal(prep, &pr); err != nil || pr.Image == "" || pr.Tag == "" {
		return "", p.errorf(provider.InvalidRequest, "create", "prepared data lacks image or tag (%s)", prep)
	}
	zone := offer.Location.Zone
	if zone == "" {
		return "", p.errorf(provider.InvalidRequest, "create", "offer %s has no zone", offer.Key())
	}
	if d.FlexStartSeconds > 0 && (offer.Spot || d.Reservation != "" || !flexSupported(d.MachineType)) {
		return "", p.errorf(provider.InvalidRequest, "create",
			"offer %s: a Flex-start VM is an on-demand %s VM of an accelerator-optimized series (%s), never Spot or in a reservation",
			offer.Key(), d.MachineType, strings.Join(flexSeries, ", "))
	}
	if spec.PlacementGroup != "" {
		if err := p.checkCompact("create", offer, d.MachineType); err != nil {
			return "", err
		}
	}
	inst := p.instance(offer, d, pr, spec)
	cctx, cancel := p.call(ctx)
	op, err := p.instances.Insert(cctx, &computepb.InsertInstanceRequest{
		Project: p.cfg.Project, Zone: zone, InstanceResource: inst, RequestId: proto(requestID(spec)),
	}, noRetry)
	cancel()
	if err != nil {
		if isAlreadyExists(err) {
			return p.adopt(ctx, zone, spec)
		}
		return "", p.classify("create", err)
	}
	id := ""
	if t := op.Proto().GetTargetId(); t != 0 {
		id = strconv.FormatUint(t, 10)
	}
	wait := p.wait
	if d.FlexStartSeconds > 0 {
		wait = p.checkOnce // queued: the operation runs until capacity is found
	}
	oe, werr := wait(ctx, op)
	switch {
	case oe != nil && IsCode(oe, "RESOURCE_ALREADY_EXISTS"):
		return p.adopt(ctx, zone, spec)
	case oe != nil:
		return "", p.classifyOp("create", oe)
	case werr != nil && ctx.Err() != nil:
		// The caller gave up; the insert was accepted and may land. The
		// core observes by label before anything else.
		return "", p.errorf(provider.Transient, "create", "waiting for %s: %w", op.Name(), werr)
	case werr != nil:
		// The bounded wait ran out or a poll failed: the insert was
		// accepted, its outcome shows in Observe.
		p.log.Warn("gcp: insert accepted, outcome not yet known", "provider", p.name, "vm", spec.VM,
			"zone", zone, "operation", op.Name(), "err", p.maskErr(werr))
	case op.Proto().GetHttpErrorStatusCode() >= 300:
		return "", p.classifyOp("create", &OperationError{Operation: op.Name(), HTTPStatus: int(op.Proto().GetHttpErrorStatusCode()),
			Messages: []string{op.Proto().GetHttpErrorMessage()}})
	}
	if id == "" {
		return p.adopt(ctx, zone, spec)
	}
	p.log.Info("gcp: created", "provider", p.name, "vm", spec.VM, "zone", zone, "instance", id,
		"machine_type", d.MachineType, "spot", offer.Spot)
	return id, nil
}

// tags are the instance's network tags: its own rule's, and the shared
// rule's when Prepare made one.
func tags(pr prepared) []string {
	if pr.SharedTag == "" {
		return []string{pr.Tag}
	}
	return []string{pr.Tag, pr.SharedTag}
}

// instance builds the insert body. The user-data holds a private host key:
// it goes to the API and nowhere else.
func (p *Provider) instance(offer *provider.Offer, d offerDetail, pr prepared, spec *provider.InstanceSpec) *computepb.Instance {
	zone := offer.Location.Zone
	user := spec.SSHUser
	if user == "" {
		user = "gpuprov"
	}
	var keys []string
	for _, k := range spec.AuthorizedKeys {
		keys = append(keys, user+":"+strings.TrimSpace(k))
	}
	meta := []*computepb.Items{
		{Key: proto("user-data"), Value: proto(provider.CloudInit(spec))},
		{Key: proto("enable-oslogin"), Value: proto("FALSE")},
		{Key: proto("install-nvidia-driver"), Value: proto("True")},
	}
	if len(keys) > 0 {
		meta = append(meta, &computepb.Items{Key: proto("ssh-keys"), Value: proto(strings.Join(keys, "\n"))})
	}
	sched := &computepb.Scheduling{OnHostMaintenance: proto("TERMINATE"), AutomaticRestart: proto(false)}
	if offer.Spot {
		sched.ProvisioningModel = proto("SPOT")
		sched.InstanceTerminationAction = proto("DELETE")
	}
	nic := &computepb.NetworkInterface{
		Network:       proto(pr.Network),
		AccessConfigs: []*computepb.AccessConfig{{Name: proto("External NAT"), Type: proto("ONE_TO_ONE_NAT")}},
	}
	if s := p.subnetworkPath(offer.Location.Region); s != "" {
		nic.Subnetwork = proto(s)
	}
	in := &computepb.Instance{
		Name:        proto(provider.ResourceName(spec.VM)),
		MachineType: proto("zones/" + zone + "/machineTypes/" + d.MachineType),
		Labels:      spec.Labels(),
		Tags:        &computepb.Tags{Items: tags(pr)},
		Metadata:    &computepb.Metadata{Items: meta},
		Scheduling:  sched,
		Disks: []*computepb.AttachedDisk{{
			Boot: proto(true), AutoDelete: proto(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{
				SourceImage: proto(pr.Image), DiskSizeGb: proto(int64(max(p.cfg.DiskSizeGB, offer.DiskGB))),
				DiskType: proto("zones/" + zone + "/diskTypes/pd-balanced"), Labels: spec.Labels(),
			},
		}},
		NetworkInterfaces: []*computepb.NetworkInterface{nic},
	}
	in.ReservationAffinity = reservationAffinity(d)
	if d.FlexStartSeconds > 0 {
		flexScheduling(in, sched, d.FlexStartSeconds)
	}
	if spec.PlacementGroup != "" {
		// Compact placement requires onHostMaintenance TERMINATE, which
		// sched already sets for every GPU VM.
		in.ResourcePolicies = []string{p.policyPath(regionOf(offer.Location), spec.PlacementGroup)}
	}
	if d.Accelerator != "" {
		in.GuestAccelerators = []*computepb.AcceleratorConfig{{
			AcceleratorType:  proto("zones/" + zone + "/acceleratorTypes/" + d.Accelerator),
			AcceleratorCount: proto(int32(d.Count)),
		}}
	}
	return in
}

// adopt returns the id of the instance gpuprov-<vm> in zone if it carries
// this VM's identity. One that does not (another installation's VM of the
// same name) is Unavailable: this zone cannot take the VM, nothing was
// created.
func (p *Provider) adopt(ctx context.Context, zone string, spec *provider.InstanceSpec) (string, error) {
	in, err := p.get(ctx, zone, provider.ResourceName(spec.VM))
	if err != nil {
		return "", p.classify("create", err)
	}
	if !p.ours(in, spec.VM) {
		return "", p.errorf(provider.Unavailable, "create",
			"instance %s in %s exists and does not carry the identity of VM %s in installation %s",
			in.GetName(), zone, spec.VM, p.installation)
	}
	p.log.Info("gcp: adopted existing instance", "provider", p.name, "vm", spec.VM, "zone", zone, "instance", in.GetId())
	return strconv.FormatUint(in.GetId(), 10), nil
}

// get reads one instance.
func (p *Provider) get(ctx context.Context, zone, name string) (*computepb.Instance, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	return p.instances.Get(cctx, &computepb.GetInstanceRequest{Project: p.cfg.Project, Zone: zone, Instance: name}, noRetry)
}

// ours reports whether in carries vm's identity in this installation.
func (p *Provider) ours(in *computepb.Instance, vm string) bool {
	l := in.GetLabels()
	return l[provider.LabelVM] == vm && l[provider.LabelInstallation] == p.installation
}
