package kubernetes

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// StartupScript run by dash (Debian's and Ubuntu's /bin/sh) and bash, in a
// scratch root (GPUPROV_ROOT) with nothing on PATH but stubs that record
// their arguments, so nothing on the host is touched: it installs the
// Secret's authorized_keys for the user and the injected host key as the
// only host key, and execs sshd in the foreground on port 22 with that key
// and no passwords; a new user gets passwordless sudo; without an injected
// key it generates one.
func TestStartupScript(t *testing.T) {
	const sshd = "sshd -D -e -p 22 -o HostKey=ROOT/etc/ssh/ssh_host_ed25519_key -o PasswordAuthentication=no " +
		"-o KbdInteractiveAuthentication=no -o PermitRootLogin=prohibit-password -o UsePAM=no"
	for _, shell := range []string{"dash", "bash"} {
		path, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("%s: not installed", shell)
			continue
		}
		for _, tc := range []struct {
			name    string
			user    string
			hostKey bool
			want    []string // the calls, in order
			sudoers string
		}{
			{"root with host key", "root", true, []string{
				"install -d -m 0700 -o root HOME/.ssh",
				"install -m 0600 -o root SECRET/authorized_keys HOME/.ssh/authorized_keys",
				"mkdir -p ROOT/run/sshd ROOT/etc/ssh",
				"install -m 0600 SECRET/ssh_host_ed25519_key ROOT/etc/ssh/ssh_host_ed25519_key",
				"install -m 0644 SECRET/ssh_host_ed25519_key.pub ROOT/etc/ssh/ssh_host_ed25519_key.pub",
				sshd,
			}, ""},
			{"new user without host key", "gpuprov-test-user", false, []string{
				"id -u gpuprov-test-user",
				"useradd -m -s /bin/sh gpuprov-test-user",
				"chmod 0440 ROOT/etc/sudoers.d/gpuprov",
				"install -d -m 0700 -o gpuprov-test-user HOME/.ssh",
				"install -m 0600 -o gpuprov-test-user SECRET/authorized_keys HOME/.ssh/authorized_keys",
				"mkdir -p ROOT/run/sshd ROOT/etc/ssh",
				"ssh-keygen -q -t ed25519 -N  -f ROOT/etc/ssh/ssh_host_ed25519_key",
				sshd,
			}, "gpuprov-test-user ALL=(ALL) NOPASSWD:ALL\n"},
		} {
			t.Run(shell+"/"+tc.name, func(t *testing.T) {
				dir := t.TempDir()
				bin, secret, root, log := filepath.Join(dir, "bin"), filepath.Join(dir, "secret"), filepath.Join(dir, "root"), filepath.Join(dir, "calls")
				for _, d := range []string{bin, secret, filepath.Join(root, "etc", "sudoers.d")} {
					if err := os.MkdirAll(d, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				files := map[string]string{"authorized_keys": "ssh-ed25519 AAAA user\n"}
				if tc.hostKey {
					files["ssh_host_ed25519_key"], files["ssh_host_ed25519_key.pub"] = "key", "pub"
				}
				for name, body := range files {
					if err := os.WriteFile(filepath.Join(secret, name), []byte(body), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				// Every stub logs its call but rm (its glob depends on
				// the scratch root's contents); id fails: no such user.
				for _, name := range []string{"install", "mkdir", "chmod", "useradd", "adduser", "ssh-keygen", "sshd", "rm", "id"} {
					stub := "#!" + path + "\n"
					if name != "rm" {
						stub += `echo "${0##*/} $*" >>` + log + "\n"
					}
					if name == "id" {
						stub += "exit 1\n"
					}
					if err := os.WriteFile(filepath.Join(bin, name), []byte(stub), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				// ~user is the passwd database's home, as the shell expands it.
				home, err := exec.Command(path, "-c", `eval echo "~`+tc.user+`"`).Output()
				if err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command(path, "-c", StartupScript)
				cmd.Env = []string{"PATH=" + bin, "GPUPROV_SSH_USER=" + tc.user, "GPUPROV_SSH_DIR=" + secret, "GPUPROV_ROOT=" + root}
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%v: %s", err, out)
				}
				b, _ := os.ReadFile(log)
				got := strings.TrimSpace(strings.NewReplacer(secret, "SECRET", root, "ROOT", strings.TrimSpace(string(home)), "HOME").Replace(string(b)))
				if want := strings.Join(tc.want, "\n"); got != want {
					t.Fatalf("calls:\n%s\nwant:\n%s", got, want)
				}
				sudoers, _ := os.ReadFile(filepath.Join(root, "etc", "sudoers.d", "gpuprov"))
				if string(sudoers) != tc.sudoers {
					t.Fatalf("sudoers %q, want %q", sudoers, tc.sudoers)
				}
			})
		}
	}
}

// A GPUPROV_SSH_USER that is not a user name stops the script before it
// runs anything: the name would otherwise reach `eval echo "~$u"`.
func TestStartupScriptRefusesABadUser(t *testing.T) {
	for _, shell := range []string{"dash", "bash"} {
		path, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("%s: not installed", shell)
			continue
		}
		for _, user := range []string{`x"; touch pwned; "`, "$(touch pwned)", "Root", "-x", "a b", "a*"} {
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			if err := os.MkdirAll(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			log := filepath.Join(dir, "calls")
			for _, name := range []string{"install", "mkdir", "chmod", "useradd", "adduser", "ssh-keygen", "sshd", "rm", "id", "touch", "apt-get"} {
				if err := os.WriteFile(filepath.Join(bin, name), []byte("#!"+path+"\necho \"${0##*/} $*\" >>"+log+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(path, "-c", StartupScript)
			cmd.Dir = dir
			cmd.Env = []string{"PATH=" + bin, "GPUPROV_SSH_USER=" + user, "GPUPROV_SSH_DIR=" + dir, "GPUPROV_ROOT=" + dir}
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "GPUPROV_SSH_USER is not a user name") {
				t.Errorf("%s, user %q: %v: %s", shell, user, err, out)
			}
			if calls, _ := os.ReadFile(log); len(calls) != 0 {
				t.Errorf("%s, user %q: ran %s", shell, user, calls)
			}
		}
	}
}
