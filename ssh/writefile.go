package ssh

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// checksumExit is the exit status of the WriteFile script when the sha256
// of the received file differs from the content's.
const checksumExit = 86

// WriteFile installs content at path on the VM, atomically, with the
// given permission bits (mode.Perm(); other bits are refused).
//
// The content travels through the command's stdin — never on a command
// line — into a temporary file created 0600 (umask 077, exclusive create)
// in the destination's directory; the remote sha256sum of that file must
// equal the local digest (else the error wraps [ErrChecksumMismatch] and
// the temporary file is removed); then it is chmod-ed and renamed onto
// path with `mv -f`. Readers see the old file or the new one, never a part.
// Writing the same content again is harmless. The parent directory is
// created first (mkdir -p, with the remote default umask).
//
// Everything runs as root: directly when the login user is root, else
// through `sudo -n`, which never prompts. Whether the user is root is
// probed once per Client with `id -u`. If sudo needs a password, the
// error wraps [ErrNoSudo] and says to grant NOPASSWD.
//
// path must be absolute and name a file.
func (c *Client) WriteFile(ctx context.Context, path string, content []byte, mode fs.FileMode) error {
	script, err := writeScript(path, sha256.Sum256(content), mode)
	if err != nil {
		return fmt.Errorf("ssh: write %s on %s: %w", path, c.target, err)
	}
	cmd, err := c.asRootCommand(ctx, script)
	if err != nil {
		return fmt.Errorf("ssh: write %s: %w", path, err)
	}
	o := runOptions{limit: 64 << 10, grace: DefaultKillGrace, stdin: bytes.NewReader(content), sudo: true}
	_, err = c.run(ctx, cmd, o)
	var ee *ExitError
	if errors.As(err, &ee) && ee.Code == checksumExit {
		return fmt.Errorf("ssh: write %s on %s: %w (%w)", path, c.target, ErrChecksumMismatch, err)
	}
	if err != nil {
		return fmt.Errorf("ssh: write %s: %w", path, err)
	}
	c.log.Debug("ssh wrote file", "path", path, "bytes", len(content), "mode", fmt.Sprintf("%04o", mode.Perm()))
	return nil
}

// writeScript returns the shell script of WriteFile.
func writeScript(p string, sum [sha256.Size]byte, mode fs.FileMode) (string, error) {
	if !path.IsAbs(p) || strings.HasSuffix(p, "/") || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: path %q must be absolute and name a file", ErrInvalidConfig, p)
	}
	if mode&^fs.ModePerm != 0 {
		return "", fmt.Errorf("%w: mode %v has bits other than permissions", ErrInvalidConfig, mode)
	}
	p = path.Clean(p)
	dir, base := path.Dir(p), path.Base(p)
	if base == "/" || base == "." || base == ".." {
		return "", fmt.Errorf("%w: path %q must name a file", ErrInvalidConfig, p)
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails
	if len(base) > 100 {
		base = base[:100]
	}
	tmp := path.Join(dir, "."+base+".gpuprov-"+hex.EncodeToString(nonce[:])+".tmp")

	// set -C: `>` refuses to follow or clobber an existing file.
	script := strings.Join([]string{
		"set -e",
		"mkdir -p -- " + Quote(dir),
		"umask 077",
		"t=" + Quote(tmp),
		`trap 'rm -f -- "$t"' EXIT`,
		"set -C",
		`cat > "$t"`,
		"set +C",
		`s=$(sha256sum < "$t")`,
		`s=${s%% *}`,
		fmt.Sprintf(`if [ "$s" != %s ]; then echo "sha256 of the received file is $s, not %s" >&2; exit %d; fi`,
			hex.EncodeToString(sum[:]), hex.EncodeToString(sum[:]), checksumExit),
		fmt.Sprintf(`chmod %04o "$t"`, mode.Perm()),
		"mv -f -- \"$t\" " + Quote(p),
		"trap - EXIT",
	}, "\n")
	return script, nil
}

// asRootCommand wraps script to run as root under sh: `sh -c` for root,
// `sudo -n -- sh -c` otherwise.
func (c *Client) asRootCommand(ctx context.Context, script string) (string, error) {
	root, err := c.isRoot(ctx)
	if err != nil {
		return "", err
	}
	if root {
		return "sh -c " + Quote(script), nil
	}
	return "sudo -n -- sh -c " + Quote(script), nil
}

// viaSudo reports that commands run as root go through `sudo -n`: the
// login user is known not to be root.
func (c *Client) viaSudo() bool {
	c.privMu.Lock()
	defer c.privMu.Unlock()
	return c.privKnown && !c.asRoot
}

// isRoot probes, once per Client, whether the login user is root, and if
// not, whether `sudo -n` works. Failures are not cached.
func (c *Client) isRoot(ctx context.Context) (bool, error) {
	c.privMu.Lock()
	defer c.privMu.Unlock()
	if c.privKnown {
		return c.asRoot, nil
	}
	o := runOptions{limit: 4 << 10, grace: DefaultKillGrace}
	res, err := c.run(ctx, "id -u", o)
	if err != nil {
		return false, fmt.Errorf("ssh: probing the remote uid: %w", err)
	}
	uid := strings.TrimSpace(string(res.Stdout))
	if uid == "0" {
		c.privKnown, c.asRoot = true, true
		return true, nil
	}
	if _, err := c.run(ctx, "sudo -n true", o); err != nil {
		var ee *ExitError
		if errors.As(err, &ee) {
			return false, fmt.Errorf("ssh: %s is uid %s, not root, and `sudo -n true` failed; "+
				"allow it passwordless sudo (NOPASSWD): %w: %w", c.target, uid, ErrNoSudo, err)
		}
		return false, fmt.Errorf("ssh: probing sudo: %w", err)
	}
	c.privKnown = true
	return false, nil
}
