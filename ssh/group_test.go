package ssh

import (
	"bytes"
	"strings"
	"testing"
)

// The report line leaves stderr byte for byte as the command wrote it,
// however the stream is cut into writes, and whatever came before it.
func TestGroupReportStripsItsLineOnly(t *testing.T) {
	tests := []struct {
		name      string
		stream    func(token string) string
		wantOut   string
		wantGroup int
	}{
		{name: "first line", stream: func(tok string) string { return tok + "4242\nerr: x\n\x00\xff" },
			wantOut: "err: x\n\x00\xff", wantGroup: 4242},
		{name: "alone", stream: func(tok string) string { return tok + "7\n" }, wantGroup: 7},
		{name: "after start-up noise", stream: func(tok string) string {
			return "Could not chdir to home directory /home/u\nno newline" + tok + "99\nrest"
		}, wantOut: "Could not chdir to home directory /home/u\nno newlinerest", wantGroup: 99},
		{name: "no report (not a POSIX shell)", stream: func(string) string { return "fish: $$ is not supported\n" },
			wantOut: "fish: $$ is not supported\n"},
		{name: "another run's token", stream: func(string) string { return "gpuprov-pgid-0123456789abcdef 5\n" },
			wantOut: "gpuprov-pgid-0123456789abcdef 5\n"},
		{name: "not a group id", stream: func(tok string) string { return tok + "$$\nx" }, wantOut: "TOKEN$$\nx"},
		{name: "group 1 is refused", stream: func(tok string) string { return tok + "1\n" }, wantOut: "TOKEN1\n"},
		{name: "line never ends", stream: func(tok string) string { return "a" + tok + "12" }, wantOut: "aTOKEN12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probe := newGroupReport(nil)
			stream := tt.stream(string(probe.token))
			for cut := range len(stream) + 1 { // every split into two writes, and byte by byte
				for _, chunks := range [][]string{{stream[:cut], stream[cut:]}, strings.Split(stream, "")} {
					var out bytes.Buffer
					g := newGroupReport(&out)
					g.token = probe.token
					for _, c := range chunks {
						if n, err := g.Write([]byte(c)); n != len(c) || err != nil {
							t.Fatalf("Write = %d, %v", n, err)
						}
					}
					g.finish()
					want := strings.ReplaceAll(tt.wantOut, "TOKEN", string(probe.token))
					if out.String() != want || g.group() != tt.wantGroup {
						t.Fatalf("chunks %q: passed on %q, group %d; want %q, group %d",
							chunks, out.String(), g.group(), want, tt.wantGroup)
					}
					select {
					case <-g.known:
						if tt.wantGroup == 0 {
							t.Fatal("known closed without a group")
						}
					default:
						if tt.wantGroup != 0 {
							t.Fatal("known not closed")
						}
					}
				}
			}
		})
	}
}

// Past groupScanLimit, stderr without a report is passed on as it comes.
func TestGroupReportGivesUpAfterLimit(t *testing.T) {
	var out bytes.Buffer
	g := newGroupReport(&out)
	big := bytes.Repeat([]byte("x"), groupScanLimit+1)
	_, _ = g.Write(big)
	if out.Len() != len(big) {
		t.Fatalf("held %d bytes back past the limit", len(big)-out.Len())
	}
	_, _ = g.Write(append(append([]byte{}, g.token...), "5\n"...))
	if g.group() != 0 || out.Len() != len(big)+len(g.token)+2 {
		t.Fatalf("a report after the limit was taken: group %d", g.group())
	}
}
