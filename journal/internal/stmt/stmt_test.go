package stmt

import (
	"reflect"
	"regexp"
	"strconv"
	"testing"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/rowcodec"
)

var dialects = map[string]Dialect{
	"sqlite":   {Param: Numbered},
	"postgres": {Param: Dollar, Prefix: "gpuprov_", LockRow: " FOR UPDATE", Collate: ` COLLATE "C"`, In: Any},
	"clock":    {Param: Dollar, Now: "(0)"},
}

var placeholder = regexp.MustCompile(`[?$](\d+)`)

// args returns the highest argument a statement names, and fails t if it
// skips one.
func args(t *testing.T, q string) int {
	t.Helper()
	seen := map[int]bool{}
	top := 0
	for _, m := range placeholder.FindAllStringSubmatch(q, -1) {
		n, _ := strconv.Atoi(m[1])
		seen[n], top = true, max(top, n)
	}
	for n := 1; n <= top; n++ {
		if !seen[n] {
			t.Errorf("%s\nnames no argument %d of %d", q, n, top)
		}
	}
	return top
}

// TestArguments: every statement takes exactly the values the codec
// produces for it, in every dialect.
func TestArguments(t *testing.T) {
	for name, d := range dialects {
		t.Run(name, func(t *testing.T) {
			s := New(d)
			create := len(rowcodec.VMCreateCols)
			if d.Now != "" {
				create++ // the lease's length
			}
			for q, want := range map[string]int{
				s.InsertVM:      create,
				s.UpdateVM:      len(rowcodec.VMWriteCols) - 1 + 4,
				s.UpsertAttempt: len(rowcodec.Split(rowcodec.AttemptCols)),
				s.UpsertBlock:   len(rowcodec.Split(rowcodec.BlockCols)),
				s.LiftBlock:     2,
				s.VMState:       1,
				s.GetVM:         1,
				s.LiveBlocks:    1,
				s.UpsertMember:  3,
				s.DeleteMember:  1,
				s.InsertVolume:  len(rowcodec.Split(rowcodec.VolumeWriteCols)),
				s.UpdateVolume:  len(rowcodec.Split(rowcodec.VolumeWriteCols)) - 1 + 3,
				s.VolumeState:   1,
				s.GetVolume:     1,
				s.DeleteVolume:  1,
			} {
				if got := args(t, q); got != want {
					t.Errorf("%s\ntakes %d arguments, the codec gives %d", q, got, want)
				}
			}
		})
	}
}

// TestLists: ListVMs and ListEvents number their arguments in order, pass a
// list the dialect's way, and say when no VM can match.
func TestLists(t *testing.T) {
	sqlite, pg := New(dialects["sqlite"]), New(dialects["postgres"])
	opts := journal.ListOptions{States: []journal.VMState{journal.StateReady, journal.StateFailed}, Live: true, Cluster: "k1"}
	for _, tc := range []struct {
		s    *Statements
		want []any
	}{
		{sqlite, []any{"ready", "k1"}},
		{pg, []any{[]string{"ready"}, "k1"}},
	} {
		q, got, none := tc.s.ListVMs(opts)
		if none || !reflect.DeepEqual(got, tc.want) || args(t, q) != len(tc.want) {
			t.Errorf("ListVMs(%+v) = %q, %#v, %v; want arguments %#v", opts, q, got, none, tc.want)
		}
	}
	if _, _, none := pg.ListVMs(journal.ListOptions{Live: true, States: []journal.VMState{journal.StateDeleted}}); !none {
		t.Error("ListVMs of live deleted VMs: want none")
	}
	q, got := pg.ListVolumes(journal.VolumeListOptions{Live: true, VM: "vm-a"})
	if want := []any{"vm-a"}; !reflect.DeepEqual(got, want) || args(t, q) != 1 {
		t.Errorf("ListVolumes = %q, %#v; want arguments %#v", q, got, want)
	}
	q, got = sqlite.ListEvents(journal.EventQuery{VM: "vm-a", After: 7, Limit: 3})
	if want := []any{int64(7), "vm-a", 3}; !reflect.DeepEqual(got, want) || args(t, q) != 3 {
		t.Errorf("ListEvents = %q, %#v; want arguments %#v", q, got, want)
	}
}
