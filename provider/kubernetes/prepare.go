package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/org/gpuprov/provider"
)

// Keys of the instance Secret, and where the pod mounts it.
const (
	secretAuthorizedKeys = "authorized_keys"
	secretHostKey        = "ssh_host_ed25519_key"
	secretHostKeyPub     = "ssh_host_ed25519_key.pub"
	secretMountPath      = "/etc/gpuprov/ssh"
)

// prepared is Prepare's journaled result: the names of what it made. It
// holds no key material (the Secret does).
type prepared struct {
	Namespace string `json:"namespace"`
	Secret    string `json:"secret"`
	Service   string `json:"service"`
}

// Prepare makes the VM's Secret and Service gpuprov-<vm> in the namespace,
// labelled with the VM's identity (and the request's labels), or adopts
// them when they exist and carry this installation's identity:
//
//   - the Secret holds authorized_keys (spec.AuthorizedKeys) and, when the
//     core handed one, the injected host key (ssh_host_ed25519_key and
//     .pub). The core generates an attempt's host key after Prepare, so
//     Create writes it; an adopted Secret's keys are brought up to date;
//   - the Service (type service_type) selects the pod by both identity
//     labels and exposes port 22 ("ssh"); a LoadBalancer also exposes
//     spec.OpenPorts with their numbers and admits only the effective
//     source ranges (see ensureService).
//
// A login user (spec.SSHUser) that is not a Linux user name is refused
// before anything is made (see sshUser).
//
// One Secret and one Service serve every zone of the cluster: the core runs
// one attempt of a VM at a time and cleans up between locations. An object
// of the name that another installation (or nobody) labelled is not
// touched: Unavailable for the cluster.
func (p *Provider) Prepare(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (json.RawMessage, error) {
	if err := p.checkRegion("prepare", offer.Location); err != nil {
		return nil, err
	}
	if _, err := p.sshUser("prepare", spec); err != nil {
		return nil, err
	}
	if err := p.ensureSecret(ctx, "prepare", spec); err != nil {
		return nil, err
	}
	if err := p.ensureService(ctx, "prepare", spec); err != nil {
		return nil, err
	}
	name := provider.ResourceName(spec.VM)
	b, err := json.Marshal(prepared{Namespace: p.cfg.Namespace, Secret: name, Service: name})
	if err != nil {
		return nil, p.errorf(provider.Failed, "prepare", "encoding the prepared state: %w", err)
	}
	return b, nil
}

// ours reports whether an object's labels carry vm's identity in this
// installation.
func (p *Provider) ours(labels map[string]string, vm string) bool {
	return labels[provider.LabelVM] == vm && labels[provider.LabelInstallation] == p.installation
}

func (p *Provider) notOurs(op, kind, name string) *provider.Error {
	pe := p.errorf(provider.Unavailable, op, "%s %s/%s exists and does not carry this installation's identity (%s=%s); not touching it",
		kind, p.cfg.Namespace, name, provider.LabelInstallation, p.installation)
	pe.Block = provider.ScopeRegion
	return pe
}

func secretData(spec *provider.InstanceSpec) map[string][]byte {
	var ak strings.Builder
	for _, k := range spec.AuthorizedKeys {
		ak.WriteString(strings.TrimSpace(k) + "\n")
	}
	d := map[string][]byte{secretAuthorizedKeys: []byte(ak.String())}
	if hk := spec.HostKey; hk != nil && hk.PrivatePEM != "" {
		d[secretHostKey] = []byte(hk.PrivatePEM)
		d[secretHostKeyPub] = []byte(strings.TrimSpace(hk.Public) + "\n")
	}
	return d
}

// ensureSecret creates the VM's Secret, or brings an existing one of ours
// up to date (authorized keys always; the host key when spec has one).
func (p *Provider) ensureSecret(ctx context.Context, op string, spec *provider.InstanceSpec) error {
	name := provider.ResourceName(spec.VM)
	secrets := p.cs.CoreV1().Secrets(p.cfg.Namespace)
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.cfg.Namespace, Labels: spec.Labels()},
		Type:       corev1.SecretTypeOpaque,
		Data:       secretData(spec),
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	_, err := secrets.Create(cctx, want, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return p.classify(op+": create secret", err)
	}
	cur, err := secrets.Get(cctx, name, metav1.GetOptions{})
	if err != nil {
		return p.classify(op+": get secret", err)
	}
	if !p.ours(cur.Labels, spec.VM) {
		return p.notOurs(op, "secret", name)
	}
	upd := cur.DeepCopy()
	if upd.Data == nil {
		upd.Data = map[string][]byte{}
	}
	maps.Copy(upd.Data, want.Data)
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	maps.Copy(upd.Labels, want.Labels)
	if _, err := secrets.Update(cctx, upd, metav1.UpdateOptions{}); err != nil {
		return p.classify(op+": update secret", err)
	}
	return nil
}

// servicePorts: ssh, and on a LoadBalancer the open ports, by number.
func (p *Provider) servicePorts(spec *provider.InstanceSpec) []corev1.ServicePort {
	ports := []corev1.ServicePort{{Name: "ssh", Protocol: corev1.ProtocolTCP, Port: 22, TargetPort: intstr.FromInt32(22)}}
	if p.cfg.ServiceType != ServiceLoadBalancer {
		return ports
	}
	for _, op := range spec.OpenPorts {
		proto := corev1.ProtocolTCP
		if strings.EqualFold(op.Protocol, "udp") {
			proto = corev1.ProtocolUDP
		}
		if op.Number == 22 && proto == corev1.ProtocolTCP {
			continue
		}
		n := int32(op.Number)
		ports = append(ports, corev1.ServicePort{Name: fmt.Sprintf("%s-%d", strings.ToLower(string(proto)), n),
			Protocol: proto, Port: n, TargetPort: intstr.FromInt32(n)})
	}
	return ports
}

// ensureService creates the VM's Service, or adopts an existing one of ours.
// A LoadBalancer admits only provider.SourcesFor(spec, source_ranges), as
// spec.loadBalancerSourceRanges, when those are restricted (the field is
// left unset for everyone). Only the callers' ranges go there: the pods of
// a cluster reach each other's ports over the cluster network, not through
// the load balancer.
func (p *Provider) ensureService(ctx context.Context, op string, spec *provider.InstanceSpec) error {
	name := provider.ResourceName(spec.VM)
	services := p.cs.CoreV1().Services(p.cfg.Namespace)
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.cfg.Namespace, Labels: spec.Labels()},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceType(p.cfg.ServiceType),
			Selector: map[string]string{provider.LabelVM: spec.VM, provider.LabelInstallation: spec.Installation},
			Ports:    p.servicePorts(spec),
		},
	}
	if p.cfg.ServiceType == ServiceLoadBalancer {
		if src := provider.SourcesFor(spec, p.cfg.SourceRanges); provider.Restricted(src) {
			want.Spec.LoadBalancerSourceRanges = src
		}
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	_, err := services.Create(cctx, want, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return p.classify(op+": create service", err)
	}
	cur, err := services.Get(cctx, name, metav1.GetOptions{})
	if err != nil {
		return p.classify(op+": get service", err)
	}
	if !p.ours(cur.Labels, spec.VM) {
		return p.notOurs(op, "service", name)
	}
	return nil
}

// Cleanup deletes the VM's Service and Secret gpuprov-<vm> where they carry
// this installation's identity. Missing objects (404) are success; an object
// of the name that is not ours is left alone (and logged). It touches
// nothing else.
func (p *Provider) Cleanup(ctx context.Context, loc provider.Location, vm string) error {
	if err := p.checkRegion("cleanup", loc); err != nil {
		return err
	}
	name := provider.ResourceName(vm)
	core := p.cs.CoreV1()
	cctx, cancel := p.call(ctx)
	defer cancel()
	svc, err := core.Services(p.cfg.Namespace).Get(cctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return p.classify("cleanup: get service", err)
	case !p.ours(svc.Labels, vm):
		p.log.Warn("kubernetes: cleanup leaves a service that is not ours", "provider", p.name, "vm", vm, "service", name)
	default:
		err := core.Services(p.cfg.Namespace).Delete(cctx, name, preconditions(svc.UID))
		if err != nil && !apierrors.IsNotFound(err) {
			return p.classify("cleanup: delete service", err)
		}
	}
	sec, err := core.Secrets(p.cfg.Namespace).Get(cctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return p.classify("cleanup: get secret", err)
	case !p.ours(sec.Labels, vm):
		p.log.Warn("kubernetes: cleanup leaves a secret that is not ours", "provider", p.name, "vm", vm, "secret", name)
	default:
		err := core.Secrets(p.cfg.Namespace).Delete(cctx, name, preconditions(sec.UID))
		if err != nil && !apierrors.IsNotFound(err) {
			return p.classify("cleanup: delete secret", err)
		}
	}
	return nil
}
