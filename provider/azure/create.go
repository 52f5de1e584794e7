package azure

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/provider"
)

// maxCustomData is the largest custom data the Compute API takes, decoded
// (the OSProfile.customData description: 65535 bytes).
const maxCustomData = 65535

// Create sends one PUT of the VM gpuprov-<vm>-<attempt> in the resource
// group Prepare used, with If-None-Match: * so that a replay of the same
// attempt cannot change a VM that exists: the replay is answered 412 (or,
// where the header is not honoured, 409 PropertyChangeNotAllowed for the
// new custom data) and adopts the VM if its tags carry this VM's identity.
// The VM is tagged with the identity and the request's labels, takes the
// NIC Prepare made, boots the image with an OS disk that is deleted with
// it, and carries the cloud-init custom data (the injected host key and the
// authorized keys; the keys also go in linuxConfiguration.ssh). Spot offers
// are priority Spot, eviction policy Delete, max price -1.
//
// Before the PUT, when the prepared data is of the other pricing (a
// failover in place from a Spot offer to the on-demand one of the same
// size and location, or back), it corrects the NIC's gpuprov-spot tag. A
// PUT answered ResourceGroupNotFound for the adapter's own group (deleted
// out of band after Prepare) is Transient and matches
// provider.ErrSharedGone: the core prepares again, which makes the group
// again, and resends. Other refusals are classified for the offer (see
// classifyFor).
//
// It then waits on the PUT's operation, bounded by OperationTimeout
// (default 3 minutes): allocation failures (AllocationFailed,
// ZonalAllocationFailed, OverconstrainedAllocationRequest, ...) are
// decided when the VM is placed and reported by the operation, not by the
// PUT. A failed operation is classified (the VM object is left in state
// Failed; the core's teardown finds it by its tags and deletes it). When
// the bound runs out, or a poll fails, with the operation still running,
// Create returns the id: the operation's outcome shows in Observe
// (provisioningState Failed is StatusFailed) and its code in Diagnose. It
// returns the VM's resource id.
func (p *Provider) Create(ctx context.Context, offer *provider.Offer, prep json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	var d offerDetail
	if err := json.Unmarshal(offer.Detail, &d); err != nil || d.Size == "" {
		return "", p.errorf(provider.InvalidRequest, "create", "offer has no VM size in its detail (%s)", offer.Detail)
	}
	var pr prepared
	if err := json.Unmarshal(prep, &pr); err != nil || pr.ResourceGroup == "" || pr.NIC == "" {
		return "", p.errorf(provider.InvalidRequest, "create", "prepared data lacks resource group or NIC (%s)", prep)
	}
	if spec.Attempt < 1 {
		return "", p.errorf(provider.InvalidRequest, "create", "attempt %d: attempts count from 1", spec.Attempt)
	}
	vm, err := p.machine(offer, d, pr, spec)
	if err != nil {
		return "", err
	}
	if pr.Spot == nil || *pr.Spot != offer.Spot {
		if err := p.retagNIC(ctx, pr, offer, spec); err != nil {
			return "", err
		}
	}
	name := vmName(spec.VM, spec.Attempt)
	id := p.vmID(pr.ResourceGroup, name)
	cctx, cancel := p.call(ctx)
	poller, err := p.vms.BeginCreateOrUpdate(cctx, pr.ResourceGroup, name, vm,
		&armcompute.VirtualMachinesClientBeginCreateOrUpdateOptions{IfNoneMatch: to("*")})
	cancel()
	if err != nil {
		if isStatus(err, http.StatusPreconditionFailed) || IsCode(err, "PropertyChangeNotAllowed") {
			return p.adopt(ctx, pr.ResourceGroup, name, spec)
		}
		if p.ownGroupGone(err) {
			// Deleted out of band after this VM's Prepare: the core
			// prepares again (which makes the group again) and resends.
			p.forgetGroup(pr.ResourceGroup)
			ae, _ := apiError(err)
			return "", p.seal(&provider.Error{Kind: provider.Transient, Op: "create", Provider: p.name,
				Err: fmt.Errorf("resource group %s: %w: %w", pr.ResourceGroup, provider.ErrSharedGone, ae)})
		}
		return "", p.classifyFor("create", err, offer)
	}
	_, done, werr := wait(ctx, p, poller)
	switch {
	case done && werr != nil:
		return "", p.classifyFor("create", werr, offer)
	case werr != nil && ctx.Err() != nil:
		// The caller gave up; the PUT was accepted and the VM may land. The
		// core observes by tag before anything else.
		return "", p.errorf(provider.Transient, "create", "waiting for VM %s: %w", name, werr)
	case werr != nil:
		p.log.Warn("azure: VM accepted, outcome not yet known", "provider", p.name, "vm", spec.VM,
			"region", offer.Location.Region, "instance", name, "err", p.maskErr(werr))
	case !done:
		p.log.Info("azure: VM still provisioning after the bounded wait", "provider", p.name, "vm", spec.VM,
			"region", offer.Location.Region, "instance", name, "waited", p.cfg.OperationTimeout)
	default:
		p.log.Info("azure: created", "provider", p.name, "vm", spec.VM, "region", offer.Location.Region,
			"instance", name, "size", d.Size, "spot", offer.Spot)
	}
	return id, nil
}

// classifyFor classifies a failure of the VM PUT or its operation for
// offer, which the answer alone cannot tell about:
//   - SkuNotAvailable of an on-demand offer is the subscription's
//     restriction of the size in the location or zone (Resolve errors for
//     SKU not available, aka.ms/azureskunotavailable): Unavailable for
//     restrictedFor, the offer blocked; of a Spot offer, it may be no
//     Spot capacity there, and stays Capacity;
//   - a family quota blocks the family (provider.ScopeFamily) only when
//     it names the offer's family (Offer.Family); another family's
//     refusal blocks the offer;
//   - for an offer that launches into a capacity reservation group, an
//     allocation failure, or a refusal aimed at the VM's
//     capacityReservation, is Unavailable for that offer (see
//     reservationRefusal), never Capacity.
func (p *Provider) classifyFor(op string, err error, offer *provider.Offer) *provider.Error {
	pe := classifyError(p.name, op, err)
	ae, ok := apiError(err)
	switch {
	case !ok:
	case offer.Reservation != nil && reservationRefusal(pe, ae):
		pe.Kind, pe.Block, pe.BlockFor = provider.Unavailable, provider.ScopeOffer, 0
	case pe.Kind == provider.Capacity && IsCode(ae, "SkuNotAvailable") && !offer.Spot:
		pe.Kind, pe.Block, pe.BlockFor = provider.Unavailable, provider.ScopeOffer, restrictedFor
	case pe.Block == provider.ScopeFamily && !sameFamily(quotaFamily(ae), offer.Family):
		pe.Block = provider.ScopeOffer
	}
	return p.seal(pe)
}

// reservationRefusal reports whether a failure of a VM that names a
// capacity reservation group is the group's: an allocation failure (Azure
// places a VM beyond what the group reserves as ordinary capacity, so a
// group that is full fails only with the region's allocation codes), or a
// refusal whose target is the VM's capacityReservation (a group deleted,
// or without a reservation of the size or zone, since the plan). Either
// blocks that offer only: the size's on-demand offers stay open.
func reservationRefusal(pe *provider.Error, ae *APIError) bool {
	return pe.Kind == provider.Capacity || strings.Contains(strings.ToLower(ae.Target), "capacityreservation")
}

// retagNIC sets the gpuprov-spot tag of the NIC Prepare made to offer's
// pricing (one PATCH of the NIC's tags), for prepared data of another
// pricing: Diagnose attributes a VM that is gone to a Spot eviction by
// this tag.
func (p *Provider) retagNIC(ctx context.Context, pr prepared, offer *provider.Offer, spec *provider.InstanceSpec) error {
	r, err := arm.ParseResourceID(pr.NIC)
	if err != nil {
		return p.errorf(provider.InvalidRequest, "create", "prepared data names NIC %q: %w", pr.NIC, err)
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	if _, err := p.nics.UpdateTags(cctx, pr.ResourceGroup, r.Name, armnetwork.TagsObject{Tags: nicTags(spec, offer.Spot)}, nil); err != nil {
		return p.classify("create", fmt.Errorf("network interface %s: %w", r.Name, err))
	}
	return nil
}

// machine builds the PUT body. The custom data holds a private host key:
// it goes to the API and nowhere else.
func (p *Provider) machine(offer *provider.Offer, d offerDetail, pr prepared, spec *provider.InstanceSpec) (armcompute.VirtualMachine, error) {
	user := p.cfg.AdminUser
	if u := spec.SSHUser; u != "" && userRE.MatchString(u) && !slices.Contains(disallowedUsers, u) {
		user = u
	}
	// The API takes only ssh-rsa keys of 2048 bits or more in
	// linuxConfiguration.ssh (the SSHPublicKey.keyData description) and
	// needs at least one when password login is off: the RSA keys among
	// the authorized keys go there, every key goes in the cloud-init
	// custom data, and with no RSA key a placeholder one whose private half
	// nobody holds satisfies the API.
	var keys []*armcompute.SSHPublicKey
	for _, k := range spec.AuthorizedKeys {
		if k = strings.TrimSpace(k); strings.HasPrefix(k, "ssh-rsa ") {
			keys = append(keys, &armcompute.SSHPublicKey{Path: to("/home/" + user + "/.ssh/authorized_keys"), KeyData: to(k)})
		}
	}
	if len(keys) == 0 {
		k, err := p.placeholderKey()
		if err != nil {
			return armcompute.VirtualMachine{}, p.errorf(provider.Failed, "create", "placeholder SSH key: %w", err)
		}
		keys = append(keys, &armcompute.SSHPublicKey{Path: to("/home/" + user + "/.ssh/authorized_keys"), KeyData: to(k)})
	}
	cloudInit := provider.CloudInit(spec)
	if len(cloudInit) > maxCustomData {
		return armcompute.VirtualMachine{}, p.errorf(provider.InvalidRequest, "create", "custom data is %d bytes, more than Azure's %d", len(cloudInit), maxCustomData)
	}
	name := vmName(spec.VM, spec.Attempt)
	img := &armcompute.ImageReference{}
	if pr.Image.ID != "" {
		img.ID = to(pr.Image.ID)
	} else {
		img.Publisher, img.Offer, img.SKU, img.Version = to(pr.Image.Publisher), to(pr.Image.Offer), to(pr.Image.SKU), to(pr.Image.Version)
	}
	vm := armcompute.VirtualMachine{
		Location: to(offer.Location.Region),
		Tags:     tags(spec.Labels()),
		Properties: &armcompute.VirtualMachineProperties{
			HardwareProfile: &armcompute.HardwareProfile{VMSize: to(armcompute.VirtualMachineSizeTypes(d.Size))},
			StorageProfile: &armcompute.StorageProfile{
				ImageReference: img,
				OSDisk: &armcompute.OSDisk{
					Name: to(name + "-osdisk"), CreateOption: to(armcompute.DiskCreateOptionTypesFromImage),
					DeleteOption: to(armcompute.DiskDeleteOptionTypesDelete), Caching: to(armcompute.CachingTypesReadWrite),
					DiskSizeGB:  to(int32(max(p.cfg.DiskSizeGB, offer.DiskGB))),
					ManagedDisk: &armcompute.ManagedDiskParameters{StorageAccountType: to(armcompute.StorageAccountTypesPremiumLRS)},
				},
			},
			OSProfile: &armcompute.OSProfile{
				ComputerName: to(name), AdminUsername: to(user),
				CustomData: to(base64.StdEncoding.EncodeToString([]byte(cloudInit))),
				LinuxConfiguration: &armcompute.LinuxConfiguration{
					DisablePasswordAuthentication: to(true), ProvisionVMAgent: to(true),
					SSH: &armcompute.SSHConfiguration{PublicKeys: keys},
				},
			},
			NetworkProfile: &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{
				ID: to(pr.NIC),
				Properties: &armcompute.NetworkInterfaceReferenceProperties{
					Primary: to(true), DeleteOption: to(armcompute.DeleteOptionsDetach),
				},
			}}},
			Priority: to(armcompute.VirtualMachinePriorityTypesRegular),
		},
	}
	if z := zoneOf(offer.Location); z != "" {
		vm.Zones = []*string{to(z)}
	}
	if d.ReservationGroup != "" {
		// The VM draws on the group only because it names it; Azure picks
		// the group's reservation of the VM's size and zone.
		vm.Properties.CapacityReservation = &armcompute.CapacityReservationProfile{
			CapacityReservationGroup: &armcompute.SubResource{ID: to(d.ReservationGroup)},
		}
	}
	if offer.Spot {
		vm.Properties.Priority = to(armcompute.VirtualMachinePriorityTypesSpot)
		vm.Properties.EvictionPolicy = to(armcompute.VirtualMachineEvictionPolicyTypesDelete)
		vm.Properties.BillingProfile = &armcompute.BillingProfile{MaxPrice: to(-1.0)}
	}
	return vm, nil
}

// placeholder is an ssh-rsa public key whose private half was dropped
// when it was made, once per process (2048 bits: the API's minimum).
var placeholder struct {
	once sync.Once
	key  string
	err  error
}

func (p *Provider) placeholderKey() (string, error) {
	placeholder.once.Do(func() {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			placeholder.err = err
			return
		}
		pub, err := ssh.NewPublicKey(&key.PublicKey)
		if err != nil {
			placeholder.err = err
			return
		}
		placeholder.key = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))) + " gpuprov-placeholder"
	})
	return placeholder.key, placeholder.err
}

// adopt returns the id of the VM name in rg if it carries this VM's
// identity. One that does not (another installation's VM of the same name
// in a shared resource group) is Unavailable: this location cannot take
// the VM, nothing was created.
func (p *Provider) adopt(ctx context.Context, rg, name string, spec *provider.InstanceSpec) (string, error) {
	cctx, cancel := p.call(ctx)
	got, err := p.vms.Get(cctx, rg, name, nil)
	cancel()
	if err != nil {
		return "", p.classify("create", err)
	}
	if !p.ours(got.Tags, spec.VM) {
		return "", p.errorf(provider.Unavailable, "create",
			"VM %s in %s exists and does not carry the identity of VM %s in installation %s", name, rg, spec.VM, p.installation)
	}
	p.log.Info("azure: adopted existing VM", "provider", p.name, "vm", spec.VM, "instance", name)
	return p.vmID(rg, name), nil
}
