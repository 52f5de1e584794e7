package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/internal/sshd"
)

// Fault tests against the in-process sshd.

func TestDialHandshakeHangFailsWithinTimeout(t *testing.T) {
	vm := newFakeVM(t)
	vm.srv.SetFaults(sshd.Faults{HandshakeHang: true})
	cfg := vm.config(t)
	const timeout = 300 * time.Millisecond
	cfg.HandshakeTimeout = timeout
	begin := time.Now()
	_, err := Dial(testCtx(t), cfg)
	elapsed := time.Since(begin)
	if !errors.Is(err, ErrHandshakeTimeout) {
		t.Fatalf("Dial = %v, want ErrHandshakeTimeout", err)
	}
	if elapsed < timeout || elapsed > timeout+2*time.Second {
		t.Errorf("Dial failed after %v, want about %v", elapsed, timeout)
	}
}

func TestDialHandshakeHangHonoursContext(t *testing.T) {
	vm := newFakeVM(t)
	vm.srv.SetFaults(sshd.Faults{HandshakeHang: true})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := Dial(ctx, vm.config(t)) // HandshakeTimeout is the default 15s
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrHandshakeTimeout) {
		t.Fatalf("Dial = %v, want the context's deadline", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Dial returned after %v", d)
	}
}

func TestDialSlowBannerWithinTimeoutSucceeds(t *testing.T) {
	vm := newFakeVM(t)
	vm.srv.SetFaults(sshd.Faults{BannerDelay: 100 * time.Millisecond})
	vm.dial(t, func(c *Config) { c.HandshakeTimeout = 5 * time.Second })
}

func TestDialRefusedAndInvalidConfig(t *testing.T) {
	vm := newFakeVM(t)
	cfg := vm.config(t)
	cfg.HostKey = nil
	if _, err := Dial(testCtx(t), cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Dial without HostKey = %v, want ErrInvalidConfig", err)
	}
	if _, err := WaitReady(testCtx(t), Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("WaitReady with zero Config = %v, want ErrInvalidConfig", err)
	}
}

func TestRunDropMidCommandFailsPromptly(t *testing.T) {
	vm := newFakeVM(t)
	c := vm.dial(t, nil)
	// A first Run starts the client's kill loop, so that the drop comes at
	// the exec of the command under test.
	if _, err := c.Run(testCtx(t), "true"); err != nil {
		t.Fatal(err)
	}
	vm.srv.SetFaults(sshd.Faults{DropMidCommand: true})
	begin := time.Now()
	res, err := c.Run(testCtx(t), "sleep 30")
	if !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("Run = %v, want ErrConnectionLost", err)
	}
	var ee *ExitError
	if errors.As(err, &ee) || res.ExitCode != -1 {
		t.Errorf("a lost connection reported an exit: %+v, %v", res, err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Run noticed the drop after %v", d)
	}
	if err := c.Wait(); !errors.Is(err, ErrConnectionLost) {
		t.Errorf("Wait = %v, want ErrConnectionLost", err)
	}
}

func TestWaitReadyRetriesAuthUntilKeyInstalled(t *testing.T) {
	vm := newFakeVM(t)
	vm.srv.SetFaults(sshd.Faults{RejectAuth: true})
	var errs []error
	c, err := WaitReady(testCtx(t), vm.config(t), WithSleep(noSleep), WithProgress(func(n int, err error) {
		errs = append(errs, err)
		if n == 2 {
			vm.srv.SetFaults(sshd.Faults{}) // cloud-init installed the key
		}
	}))
	if err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	closeClient(t, c)
	if len(errs) != 2 {
		t.Fatalf("failed attempts %v, want 2", errs)
	}
	for _, e := range errs {
		if !errors.Is(e, ErrAuthFailed) {
			t.Errorf("attempt error %v, want ErrAuthFailed", e)
		}
	}
}

func TestWaitReadyContextEndWrapsLastError(t *testing.T) {
	vm := newFakeVM(t)
	vm.srv.SetFaults(sshd.Faults{RejectAuth: true})
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	_, err := WaitReady(ctx, vm.config(t), WithSleep(noSleep), WithProgress(func(n int, _ error) {
		if n == 3 {
			cancel()
		}
	}))
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("WaitReady = %v, want both context.Canceled and ErrAuthFailed", err)
	}
}

func TestWaitReadyBackoffIsJitteredAndCapped(t *testing.T) {
	addr := closedPort(t)
	const base, maxDelay = 100 * time.Millisecond, 400 * time.Millisecond
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var delays []time.Duration
	sleep := func(ctx context.Context, d time.Duration) error {
		delays = append(delays, d)
		if len(delays) == 40 {
			cancel()
		}
		return ctx.Err()
	}
	vm := newFakeVM(t)
	cfg := vm.config(t)
	cfg.Addr = addr
	_, err := WaitReady(ctx, cfg, WithBackoff(base, maxDelay), WithSleep(sleep))
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("WaitReady = %v", err)
	}
	distinct := map[time.Duration]bool{}
	for i, d := range delays {
		ceil := maxDelay
		if i < 10 {
			ceil = min(maxDelay, base<<i)
		}
		if d < 0 || d > ceil {
			t.Errorf("delay %d = %v, outside [0, %v]", i+1, d, ceil)
		}
		distinct[d] = true
	}
	if len(distinct) < 20 {
		t.Errorf("only %d distinct delays in %d: no jitter", len(distinct), len(delays))
	}
}

// closedPort returns an address where nothing listens.
func closedPort(t *testing.T) string {
	return "127.0.0.1:" + itoa(freePort(t))
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			return string(b[i:])
		}
	}
}

func TestKeepAliveDetectsDeadPeer(t *testing.T) {
	vm := newFakeVM(t)
	const interval = 50 * time.Millisecond
	c := vm.dial(t, func(c *Config) { c.KeepAlive = interval })
	started := newSignalWriter()
	done := make(chan error, 1)
	go func() {
		_, err := c.Run(context.Background(), "echo started; exec sleep 30", WithOutput(started, nil))
		done <- err
	}()
	<-started.fired
	vm.srv.SetFaults(sshd.Faults{Stall: true}) // the VM vanished without a FIN
	select {
	case err := <-done:
		if !errors.Is(err, ErrPeerUnresponsive) || !errors.Is(err, ErrConnectionLost) {
			t.Fatalf("Run = %v, want ErrPeerUnresponsive", err)
		}
	case <-time.After(guard):
		t.Fatal("keepalive did not detect the dead peer")
	}
	if err := c.Wait(); !errors.Is(err, ErrPeerUnresponsive) {
		t.Fatalf("Wait = %v, want ErrPeerUnresponsive", err)
	}
	if _, err := c.Run(testCtx(t), "true"); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("Run on a dead client = %v, want ErrConnectionLost", err)
	}
}

func TestKeepAliveKeepsHealthyConnection(t *testing.T) {
	vm := newFakeVM(t)
	c := vm.dial(t, func(c *Config) { c.KeepAlive = 10 * time.Millisecond })
	// A command spanning many keepalive intervals completes.
	if res, err := c.Run(testCtx(t), "sleep 0.3; echo fine"); err != nil || string(res.Stdout) != "fine\n" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("Wait after Close = %v, want nil", err)
	}
}

func TestRunCancelEscalatesToKill(t *testing.T) {
	vm := newFakeVM(t)
	c := vm.dial(t, nil)
	ctx, cancel := context.WithCancel(testCtx(t))
	started := newSignalWriter()
	go func() { <-started.fired; cancel() }()
	// TERM is ignored (and the ignoring is inherited by sleep).
	res, err := c.Run(ctx, `trap "" TERM; echo started; sleep 30`, WithOutput(started, nil), WithKillGrace(100*time.Millisecond))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if res.ExitCode != 128+9 {
		t.Errorf("exit code %d, want death by KILL", res.ExitCode)
	}
}

// An sshd that ignores "signal" requests (OpenSSH on root logins, and
// before 7.9 on any) still sees the command's whole process group killed
// within a second, through the Client's kill loop.
func TestRunCancelKillsGroupWhenSignalsIgnored(t *testing.T) {
	for _, sudo := range []bool{false, true} {
		t.Run(map[bool]string{false: "login user", true: "sudo"}[sudo], func(t *testing.T) {
			vm := newFakeVM(t)
			var opts []RunOption
			if sudo {
				vm = newNonRootVM(t)
				opts = append(opts, WithSudo())
			}
			vm.srv.SetFaults(sshd.Faults{IgnoreSignals: true})
			c := vm.dial(t, nil)
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			line := newLineWriter()
			var cancelled time.Time
			go func() { <-line.fired; cancelled = time.Now(); cancel() }()
			res, err := c.Run(ctx, `sleep 30 & echo $$ $!; wait`, append(opts, WithOutput(line, nil))...)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %v, want context.Canceled", err)
			}
			if d := time.Since(cancelled); d > time.Second {
				t.Errorf("Run returned %v after the cancel, want within 1s", d)
			}
			var pids [2]int
			if n, _ := fmt.Sscan(string(res.Stdout), &pids[0], &pids[1]); n != 2 || len(res.Stderr) != 0 {
				t.Fatalf("stdout %q, stderr %q: want the two pids and nothing else", res.Stdout, res.Stderr)
			}
			for _, pid := range pids {
				if !processGone(pid, cancelled.Add(time.Second)) {
					t.Errorf("pid %d still alive 1s after the cancel", pid)
				}
			}
			if sudo { // the kill went through sudo, as the command did
				want := []string{"id_-u", "sudo_-n_true", "sudo_-n_--_sh"}
				if got := vm.calls(t); strings.Join(got, " ") != strings.Join(want, " ") {
					t.Errorf("remote calls %v, want %v", got, want)
				}
				if n := vm.killLoops(t); n != 1 {
					t.Errorf("%d kill loops started through sudo, want 1", n)
				}
			}
			// The client still works.
			if res, err := c.Run(testCtx(t), "echo ok"); err != nil || string(res.Stdout) != "ok\n" {
				t.Fatalf("Run after cancel = %+v, %v", res, err)
			}
		})
	}
}

// A kill loop that ended (here: its stdin closed, as if the remote shell
// had died) is started again by the next Run, which still kills the group.
func TestRunCancelRestartsEndedKillLoop(t *testing.T) {
	vm := newFakeVM(t)
	vm.srv.SetFaults(sshd.Faults{IgnoreSignals: true})
	c := vm.dial(t, nil)
	if _, err := c.Run(testCtx(t), "true"); err != nil {
		t.Fatal(err)
	}
	first := c.killer(false)
	select {
	case <-first.ready:
	case <-time.After(guard):
		t.Fatal("the kill loop did not start")
	}
	if err := first.in.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.ended:
	case <-time.After(guard):
		t.Fatal("the kill loop did not end at EOF")
	}

	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	line := newLineWriter()
	var cancelled time.Time
	go func() { <-line.fired; cancelled = time.Now(); cancel() }()
	// A grace long enough that only the loop's TERM can end the command
	// in time: the server kills it when the session closes, 2*grace on.
	const grace = 5 * time.Second
	res, err := c.Run(ctx, `sleep 30 & echo $$ $!; wait`, WithOutput(line, nil), WithKillGrace(grace))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if d := time.Since(cancelled); d > grace/2 {
		t.Errorf("Run returned %v after the cancel: TERM did not arrive", d)
	}
	var pids [2]int
	if n, _ := fmt.Sscan(string(res.Stdout), &pids[0], &pids[1]); n != 2 {
		t.Fatalf("stdout %q: want the two pids", res.Stdout)
	}
	for _, pid := range pids {
		if !processGone(pid, cancelled.Add(grace/2)) {
			t.Errorf("pid %d still alive %v after the cancel", pid, grace/2)
		}
	}
	if c.killer(false) == first {
		t.Error("the ended kill loop is still the Client's")
	}
}

// When the connection is stalled, no second session opens and no signal
// arrives: closing the session after TERM's and KILL's grace is all Run
// can do, and it returns then.
func TestRunCancelOnStalledConnectionReturns(t *testing.T) {
	vm := newFakeVM(t)
	c := vm.dial(t, nil)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	started := newSignalWriter()
	go func() {
		<-started.fired
		vm.srv.SetFaults(sshd.Faults{Stall: true})
		cancel()
	}()
	const grace = 100 * time.Millisecond
	begin := time.Now()
	_, err := c.Run(ctx, "echo started; sleep 30", WithOutput(started, nil), WithKillGrace(grace))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if d := time.Since(begin); d > 2*grace+2*time.Second {
		t.Errorf("Run returned after %v, want about %v", d, 2*grace)
	}
	vm.srv.SetFaults(sshd.Faults{}) // let Close and the server finish cleanly
}

func TestRunConcurrentSessions(t *testing.T) {
	vm := newFakeVM(t)
	c := vm.dial(t, nil)
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			want := strings.Repeat("x", i*1000)
			res, err := c.Run(testCtx(t), "cat", WithStdin(strings.NewReader(want)))
			if err == nil && string(res.Stdout) != want {
				err = io.ErrShortWrite
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestRunRejectsNULAndClosedClient(t *testing.T) {
	vm := newFakeVM(t)
	c := vm.dial(t, nil)
	if _, err := c.Run(testCtx(t), "echo a\x00b"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Run with NUL = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(testCtx(t), "true"); err == nil {
		t.Error("Run on a closed client succeeded")
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}
