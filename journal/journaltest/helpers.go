package journaltest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// t0 is the kit's "now": leases and blocks are driven by times relative to
// it, never by the wall clock. It has nanoseconds, to catch truncation.
var t0 = time.Date(2031, 3, 4, 5, 6, 7, 123456789, time.UTC)

// at returns t0 + d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// newVM returns a pending VM named name with every field set.
func newVM(name string) journal.VM {
	return journal.VM{
		Name:          name,
		ID:            "id-" + name,
		Cluster:       "c1",
		Request:       json.RawMessage(`{"gpu":"h100","count":8,"labels":{"team":"ml"}}`),
		State:         journal.StatePending,
		Phase:         "prepare",
		Attempt:       1,
		Provider:      "sim",
		Region:        "eu-1",
		Zone:          "eu-1a",
		Offer:         json.RawMessage(`{"sku":"gpu.8x","price":12.5}`),
		PricePerHour:  12.5,
		InstanceID:    "i-" + name,
		SSHHost:       "192.0.2.7",
		SSHPort:       2222,
		SSHUser:       "ubuntu",
		HostKey:       "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake " + name,
		Deadline:      at(time.Hour),
		LastError:     "capacity: none left",
		LastErrorKind: "capacity",
		CreatedAt:     at(-time.Minute),
		UpdatedAt:     at(-time.Second),
		NextTry:       at(2 * time.Minute),
		ExpiresAt:     at(8 * time.Hour),
	}
}

// newAttempt returns attempt n of vm with every field set.
func newAttempt(vm string, n int) journal.Attempt {
	return journal.Attempt{
		VM:          vm,
		N:           n,
		Provider:    "sim",
		Region:      "eu-1",
		Zone:        "eu-1a",
		OfferKey:    fmt.Sprintf("sim/eu-1a/gpu.8x/%d", n),
		Offer:       json.RawMessage(`{"sku":"gpu.8x"}`),
		State:       journal.AttemptActive,
		Phase:       "create",
		Token:       fmt.Sprintf("tok-%s-%d", vm, n),
		Prepared:    json.RawMessage(`{"sg":"sg-1"}`),
		InstanceIDs: []string{fmt.Sprintf("i-%s-%d", vm, n)},
		HostKey:     "ssh-ed25519 AAAAKey",
		CreateSent:  at(time.Duration(n) * time.Second),
		Error:       "boom",
		ErrorKind:   "failed",
		StartedAt:   at(time.Duration(n) * time.Millisecond),
		Host:        fmt.Sprintf("m-%d", 5000+n),
		Acceptance:  json.RawMessage(`{"ok":false,"summary":"7 of 8 GPUs visible; missing 0000:db:00.0","gpus":[{"index":0}]}`),
	}
}

// newEvent returns an event of vm.
func newEvent(vm, typ string) journal.Event {
	return journal.Event{
		Time: at(time.Microsecond), VM: vm, Attempt: 1, Type: typ, Phase: "create", Provider: "sim",
		Region: "eu-1", Zone: "eu-1a", InstanceID: "i-" + vm, ErrorKind: "transient", Message: typ + " of " + vm, Owner: "o1",
	}
}

// newBlock returns a block of key until until.
func newBlock(key string, until time.Time) journal.Block {
	return journal.Block{Key: key, Scope: "offer", Provider: "sim", ErrorKind: "capacity", Reason: "stockout", Until: until, CreatedAt: t0}
}

var ctx = context.Background()

// commit commits s and fails the test on error.
func commit(t *testing.T, j journal.Journal, s *journal.Step) {
	t.Helper()
	if err := j.Commit(ctx, s); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// create commits the creation of v and returns it as stored (Version 1). A
// lease v holds (an Owner and a LeaseExpiry) must be stored as given, or,
// on a journal with a LeaseClock, for LeaseExpiry − CreatedAt from the
// journal's clock, with that expiry written back into the Step's VM.
func create(t *testing.T, j journal.Journal, v journal.VM) journal.VM {
	t.Helper()
	given := v
	s := clockOf(j).around(t, v.CreatedAt, func() { commit(t, j, &journal.Step{Create: &v}) })
	if v.Version != 1 {
		t.Fatalf("Create: Version of the Step's VM is %d after Commit, want 1", v.Version)
	}
	got := getVM(t, j, v.Name)
	if given.Owner != "" && !given.LeaseExpiry.IsZero() {
		s.check(t, "lease stored by Create", got.LeaseExpiry, given.LeaseExpiry.Sub(given.CreatedAt))
		if !v.LeaseExpiry.Equal(got.LeaseExpiry) {
			t.Errorf("Create: LeaseExpiry of the Step's VM is %v after Commit, the stored one %v", v.LeaseExpiry, got.LeaseExpiry)
		}
	}
	return got
}

// getVM returns the stored VM and fails the test if there is none.
func getVM(t *testing.T, j journal.Journal, name string) journal.VM {
	t.Helper()
	v, err := j.GetVM(ctx, name)
	if err != nil {
		t.Fatalf("GetVM(%s): %v", name, err)
	}
	return v
}

// snapshot is everything a journal holds that the kit can read back.
type snapshot struct {
	VMs      []journal.VM
	Attempts map[string][]journal.Attempt
	Events   []journal.Event
	Blocks   []journal.Block
}

// snap reads everything j holds about vms (and its whole event log and
// every block that is ever live after t0-100h).
func snap(t *testing.T, j journal.Journal, vms ...string) snapshot {
	t.Helper()
	var s snapshot
	var err error
	if s.VMs, err = j.ListVMs(ctx, journal.ListOptions{}); err != nil {
		t.Fatalf("ListVMs: %v", err)
	}
	s.Attempts = map[string][]journal.Attempt{}
	for _, vm := range vms {
		if s.Attempts[vm], err = j.Attempts(ctx, vm); err != nil {
			t.Fatalf("Attempts(%s): %v", vm, err)
		}
	}
	if s.Events, err = j.Events(ctx, journal.EventQuery{}); err != nil {
		t.Fatalf("Events: %v", err)
	}
	if s.Blocks, err = j.Blocks(ctx, at(-100*time.Hour)); err != nil {
		t.Fatalf("Blocks: %v", err)
	}
	sortBlocks(s.Blocks)
	return s
}

func sortBlocks(bs []journal.Block) {
	sort.Slice(bs, func(i, k int) bool { return bs[i].Key < bs[k].Key })
}

// norm returns v as a backend must read it back: times in UTC without a
// monotonic reading, empty JSON and lists as nil, and empty slices as nil.
func norm[T any](v T) T {
	normValue(reflect.ValueOf(&v).Elem())
	return v
}

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage(nil))
)

func normValue(v reflect.Value) {
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(v.Interface().(time.Time).Round(0).UTC()))
	case v.Kind() == reflect.Slice && v.Len() == 0:
		v.Set(reflect.Zero(v.Type()))
	case v.Type() == rawType:
		v.Set(reflect.ValueOf(append(json.RawMessage(nil), v.Bytes()...)))
	case v.Kind() == reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			normValue(v.Index(i))
		}
	case v.Kind() == reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			normValue(v.Field(i))
		}
	case v.Kind() == reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			normValue(e)
			v.SetMapIndex(k, e)
		}
	}
}

// equal fails the test unless got equals want once want is normalized (got
// must come back normalized). what names the value.
func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	want = norm(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s differs from what was written:\n%s", what, diff(reflect.ValueOf(got), reflect.ValueOf(want), ""))
	}
}

// diff describes how got and want differ, field by field.
func diff(got, want reflect.Value, path string) string {
	if reflect.DeepEqual(got.Interface(), want.Interface()) {
		return ""
	}
	switch {
	case got.Type() == timeType, got.Type() == rawType:
	case got.Kind() == reflect.Struct:
		var b strings.Builder
		for i := 0; i < got.NumField(); i++ {
			b.WriteString(diff(got.Field(i), want.Field(i), path+"."+got.Type().Field(i).Name))
		}
		return b.String()
	case got.Kind() == reflect.Slice && got.Len() == want.Len() && !got.IsNil() && !want.IsNil():
		var b strings.Builder
		for i := 0; i < got.Len(); i++ {
			b.WriteString(diff(got.Index(i), want.Index(i), fmt.Sprintf("%s[%d]", path, i)))
		}
		return b.String()
	}
	return fmt.Sprintf("  %s: got %s, want %s\n", path, show(got), show(want))
}

func show(v reflect.Value) string {
	switch {
	case v.Type() == rawType:
		if v.IsNil() {
			return "nil RawMessage"
		}
		return fmt.Sprintf("RawMessage(%q)", v.Bytes())
	case v.Type() == timeType:
		tm := v.Interface().(time.Time)
		return fmt.Sprintf("%s (location %q)", tm.Format(time.RFC3339Nano), tm.Location())
	case v.Kind() == reflect.Slice && v.IsNil():
		return "nil " + v.Type().String()
	}
	return fmt.Sprintf("%#v", v.Interface())
}

// names returns the names of vms.
func names(vms []journal.VM) []string {
	out := []string{}
	for _, v := range vms {
		out = append(out, v.Name)
	}
	return out
}

// seqs returns the Seq of events.
func seqs(es []journal.Event) []int64 {
	out := []int64{}
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}
