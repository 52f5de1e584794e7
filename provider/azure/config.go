package azure

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"

	"github.com/org/gpuprov/provider"
)

// DefaultImage is the boot image when neither the config nor the request
// names one: Microsoft's Ubuntu-HPC 22.04 marketplace image (Generation 2,
// NVIDIA driver and CUDA preinstalled), which every size of the catalog
// boots (NC A100 v4, NCads H100 v5, ND H100 v5 and the ND A100 v4 sizes
// take Generation 2 images only).
const DefaultImage = "microsoft-dsvm:ubuntu-hpc:2204:latest"

// DefaultAdminUser is the VM's administrator (the SSH login user) when the
// config names none.
const DefaultAdminUser = "azureuser"

// Config is one Azure subscription. Build it in Go and pass it as
// provider.Settings{Config: azure.Config{...}} (or to New), or write it as
// the TOML table or JSON object whose keys are the field tags; durations
// are then strings such as "5s". It holds no credential: the adapter
// authenticates with azidentity's DefaultAzureCredential (environment,
// workload identity, managed identity, Azure CLI).
type Config struct {
	// SubscriptionID is the subscription's GUID (required).
	SubscriptionID string `toml:"subscription_id" json:"subscription_id"`
	// TenantID, if set, is the Microsoft Entra tenant DefaultAzureCredential
	// authenticates in; empty: the credential's own default.
	TenantID string `toml:"tenant_id" json:"tenant_id"`
	// Regions limit Plan and List to these ARM regions (eastus, ...);
	// empty means every region of the catalog.
	Regions []string `toml:"regions" json:"regions"`
	// Zones, if set, place VMs in these availability zones ("1", "2",
	// "3") of each region, one offer per zone (Location.Zone "<region>-<n>");
	// empty: regional placement, Azure picks the zone.
	Zones []string `toml:"zones" json:"zones"`
	// ResourceGroup, if set, is an existing resource group that holds every
	// resource the adapter makes, in every region; empty: one resource group
	// per installation and region, gpuprov-<installation>-<region>, which
	// Prepare creates (and nothing deletes: it is shared).
	ResourceGroup string `toml:"resource_group" json:"resource_group"`
	// SubnetID, if set, is the resource id of an existing subnet for the
	// VMs' NICs (its virtual network fixes the region, so exactly one region
	// must be configured); empty: a shared virtual network gpuprov-<region>
	// (10.77.0.0/16, subnet "gpuprov") in the resource group, which Prepare
	// creates when missing and nothing deletes.
	SubnetID string `toml:"subnet_id" json:"subnet_id"`
	// Image overrides DefaultImage: a marketplace URN
	// (publisher:offer:sku:version) or an image resource id
	// (/subscriptions/.../images/... or a gallery image version).
	Image string `toml:"image" json:"image"`
	// AdminUser is the VM's administrator and SSH login user; zero means
	// DefaultAdminUser. Azure refuses some names (root, admin, user, ...).
	AdminUser string `toml:"admin_user" json:"admin_user"`
	// SourceRanges are the networks (CIDRs, IPv4 or IPv6, such as
	// 203.0.113.0/24) that may connect to the VMs' SSH and open ports,
	// unless a request names its own (provider.InstanceSpec.SourceRanges);
	// empty: provider.DefaultSourceRanges, everywhere ("*" in the security
	// rules). When the sources are restricted, the open ports (not SSH)
	// also admit the virtual network (service tag VirtualNetwork), so that
	// a cluster's nodes on Azure reach each other.
	SourceRanges []string `toml:"source_ranges" json:"source_ranges"`
	// Spot lets Plan offer Spot VMs (priority Spot, eviction policy Delete,
	// max price -1: never evicted for price) to requests that accept spot.
	Spot bool `toml:"spot" json:"spot"`
	// DiskSizeGB is the OS disk size in GB (at least 30); zero means 256.
	DiskSizeGB int `toml:"disk_size_gb" json:"disk_size_gb"`
	// PollInterval is how often the core observes a booting or deleting VM
	// and how often an operation is polled without Retry-After; zero means 10s.
	PollInterval time.Duration `toml:"poll_interval" json:"poll_interval"`
	// BootTimeout bounds the wait for a VM to run; zero means 20m.
	BootTimeout time.Duration `toml:"boot_timeout" json:"boot_timeout"`
	// DeleteTimeout bounds a teardown; zero means 10m (a deleted VM's NIC
	// stays reserved for 180 seconds).
	DeleteTimeout time.Duration `toml:"delete_timeout" json:"delete_timeout"`
	// ConsistencyWindow is how long a created VM may be missing from
	// listings; zero means 30s.
	ConsistencyWindow time.Duration `toml:"consistency_window" json:"consistency_window"`
	// OperationTimeout bounds each wait on an ARM long-running operation:
	// the VM PUT in Create and the network PUTs and DELETEs of Prepare and
	// Cleanup; zero means 3m.
	OperationTimeout time.Duration `toml:"operation_timeout" json:"operation_timeout"`
	// RequestTimeout bounds each API call; zero means 60s.
	RequestTimeout time.Duration `toml:"request_timeout" json:"request_timeout"`
	// RequestsPerSecond sizes the core's token bucket; zero means 10.
	RequestsPerSecond float64 `toml:"requests_per_second" json:"requests_per_second"`
	// Burst is that bucket's size; zero means 20.
	Burst int `toml:"burst" json:"burst"`
}

var (
	guidRE   = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	regionRE = regexp.MustCompile(`^[a-z][a-z0-9]+$`)
	zoneRE   = regexp.MustCompile(`^[1-9]$`)
	// rgRE: 1-90 letters, digits, '_', '-', '.', '(' and ')', not ending
	// in '.' (https://learn.microsoft.com/en-us/azure/azure-resource-manager/management/resource-name-rules#microsoftresources).
	rgRE = regexp.MustCompile(`^[-\w._()]{0,89}[-\w_()]$`)
	// userRE: a Linux user name the image's cloud-init accepts; Azure's own
	// rule is 1-64 characters minus the disallowed names.
	userRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
)

// disallowedUsers are the adminUsername values the Compute API refuses
// (the OSProfile.adminUsername description of API version 2024-11-01).
var disallowedUsers = []string{"administrator", "admin", "user", "user1", "test", "user2", "test1", "user3", "admin1", "1", "123",
	"a", "actuser", "adm", "admin2", "aspnet", "backup", "console", "david", "guest", "john", "owner", "root", "server", "sql",
	"support", "support_388945a0", "sys", "test2", "test3", "user4", "user5"}

// validate names the first bad key.
func (c *Config) validate() error {
	if c.SubscriptionID == "" {
		return errors.New("subscription_id is not set (the subscription's GUID)")
	}
	if !guidRE.MatchString(c.SubscriptionID) {
		return fmt.Errorf("subscription_id: %q is not a GUID", c.SubscriptionID)
	}
	if c.TenantID != "" && !guidRE.MatchString(c.TenantID) && !strings.Contains(c.TenantID, ".") {
		return fmt.Errorf("tenant_id: %q is neither a GUID nor a domain", c.TenantID)
	}
	for _, r := range c.Regions {
		if !regionRE.MatchString(r) {
			return fmt.Errorf("regions: %q is not an ARM region name (like eastus)", r)
		}
	}
	for _, z := range c.Zones {
		if !zoneRE.MatchString(z) {
			return fmt.Errorf("zones: %q is not an availability zone number (like \"1\")", z)
		}
	}
	if c.ResourceGroup != "" && !rgRE.MatchString(c.ResourceGroup) {
		return fmt.Errorf("resource_group: %q is not a resource group name", c.ResourceGroup)
	}
	if c.SubnetID != "" {
		id, err := arm.ParseResourceID(c.SubnetID)
		if err != nil || !strings.EqualFold(id.ResourceType.String(), "Microsoft.Network/virtualNetworks/subnets") {
			return fmt.Errorf("subnet_id: %q is not a subnet resource id (/subscriptions/S/resourceGroups/G/providers/Microsoft.Network/virtualNetworks/V/subnets/N)", c.SubnetID)
		}
		if len(c.Regions) != 1 {
			return errors.New("subnet_id: a subnet lives in one region; configure exactly that region in regions")
		}
	}
	if c.Image != "" {
		if _, err := parseImage(c.Image); err != nil {
			return fmt.Errorf("image: %w", err)
		}
	}
	if c.AdminUser != "" && (!userRE.MatchString(c.AdminUser) || slices.Contains(disallowedUsers, c.AdminUser)) {
		return fmt.Errorf("admin_user: %q is not a user name Azure accepts (lowercase, no reserved name such as root or admin)", c.AdminUser)
	}
	if err := provider.ValidateSourceRanges(c.SourceRanges); err != nil {
		return fmt.Errorf("source_ranges: %w", err)
	}
	if c.DiskSizeGB < 0 || (c.DiskSizeGB > 0 && c.DiskSizeGB < 30) {
		return fmt.Errorf("disk_size_gb: %d is below 30", c.DiskSizeGB)
	}
	if c.RequestsPerSecond < 0 || c.Burst < 0 {
		return errors.New("requests_per_second and burst must not be negative")
	}
	return nil
}

func (c *Config) applyDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.PollInterval, 10*time.Second)
	def(&c.BootTimeout, 20*time.Minute)
	def(&c.DeleteTimeout, 10*time.Minute)
	def(&c.ConsistencyWindow, 30*time.Second)
	def(&c.OperationTimeout, 3*time.Minute)
	def(&c.RequestTimeout, 60*time.Second)
	if c.RequestsPerSecond == 0 {
		c.RequestsPerSecond = 10
	}
	if c.Burst == 0 {
		c.Burst = 20
	}
	if c.DiskSizeGB == 0 {
		c.DiskSizeGB = 256
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if c.AdminUser == "" {
		c.AdminUser = DefaultAdminUser
	}
}

// image is a parsed image reference: a marketplace URN or a resource id.
type image struct {
	Publisher string `json:"publisher,omitempty"`
	Offer     string `json:"offer,omitempty"`
	SKU       string `json:"sku,omitempty"`
	Version   string `json:"version,omitempty"`
	ID        string `json:"id,omitempty"`
}

// parseImage reads publisher:offer:sku:version or an image resource id.
func parseImage(s string) (image, error) {
	if strings.HasPrefix(s, "/") {
		if _, err := arm.ParseResourceID(s); err != nil {
			return image{}, fmt.Errorf("%q is not an image resource id: %v", s, err)
		}
		return image{ID: s}, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) != 4 || slices.Contains(parts, "") {
		return image{}, fmt.Errorf("%q: want a marketplace URN publisher:offer:sku:version or an image resource id", s)
	}
	return image{Publisher: parts[0], Offer: parts[1], SKU: parts[2], Version: parts[3]}, nil
}
