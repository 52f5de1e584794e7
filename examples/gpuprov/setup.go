package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"

	gossh "golang.org/x/crypto/ssh"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/ssh"
)

// sshUser is the login the CLI asks for where a cloud lets it choose.
const sshUser = "ubuntu"

// env is where the CLI reads and writes, resolved from flags and the
// XDG base directory variables.
type env struct {
	configPath string // --config, else $XDG_CONFIG_HOME/gpuprov/config.toml
	stateDir   string // $XDG_STATE_HOME/gpuprov: journal.db, id_ed25519
	verbose    bool
	stdout     io.Writer
	stderr     io.Writer
}

func defaultConfigPath() string {
	base := os.Getenv("XDG_CONFIG_HOME")
	if base == "" {
		home, _ := os.UserHomeDir() // "" when unknown: a relative path, reported if used
		base = filepath.Join(home, ".config")
	}
	return filepath.Join(base, "gpuprov", "config.toml")
}

func defaultStateDir() string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir() // as above
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "gpuprov")
}

// dirError is a journal or state directory that cannot be used: exit 2.
type dirError struct{ msg string }

func (e *dirError) Error() string { return e.msg }

// checkDir checks that dir is a writable directory, or can be created: its
// deepest existing ancestor is a writable directory. It creates nothing.
func checkDir(what, dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return &dirError{fmt.Sprintf("%s %s: not a directory", what, dir)}
		}
		if err := checkWritable(dir); err != nil {
			return &dirError{fmt.Sprintf("%s %s: not writable: %v", what, dir, err)}
		}
		return nil
	}
	// Find the deepest existing ancestor: it must be a writable directory,
	// else MkdirAll would fail halfway and leave folders behind.
	anc := filepath.Dir(dir)
	for {
		fi, err := os.Stat(anc)
		if err == nil {
			if !fi.IsDir() {
				return &dirError{fmt.Sprintf("cannot create %s %s: %s is not a directory", what, dir, anc)}
			}
			if err := checkWritable(anc); err != nil {
				return &dirError{fmt.Sprintf("cannot create %s %s: %s is not writable", what, dir, anc)}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return &dirError{fmt.Sprintf("cannot create %s %s: %v", what, dir, err)}
		}
		parent := filepath.Dir(anc)
		if parent == anc {
			break
		}
		anc = parent
	}
	return nil
}

// ensureDir creates dir (and its parents) with mode 0700 if it does not
// exist, after checkDir. undo removes what it created (nothing when dir
// existed), for a caller whose next step failed and must leave nothing behind.
func ensureDir(what, dir string) (undo func(), err error) {
	if err := checkDir(what, dir); err != nil {
		return nil, err
	}
	var created []string // deepest first
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		created = append(created, d)
	}
	undo = func() {
		for _, d := range created {
			_ = os.Remove(d) // only removes an empty directory: never anything another process put there
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		undo()
		return nil, &dirError{fmt.Sprintf("cannot create %s %s: %v", what, dir, errors.Unwrap(err))}
	}
	return undo, nil
}

// journalURL is the configured journal, or the default sqlite file.
func (e *env) journalURL(cfg *fileConfig) string {
	if cfg.Journal != "" {
		return cfg.Journal
	}
	return "sqlite:" + filepath.Join(e.stateDir, "journal.db")
}

// journalDir is the directory of a sqlite journal ("" for other backends).
func (e *env) journalDir(cfg *fileConfig) (string, error) {
	url := e.journalURL(cfg)
	path, ok := strings.CutPrefix(url, "sqlite:")
	if !ok {
		return "", nil
	}
	path = strings.TrimPrefix(path, "//")
	if path == "" {
		return "", configErrorf("journal %q: no file named", url)
	}
	return filepath.Dir(path), nil
}

// openJournal opens the journal, creating the directory of a sqlite file
// first (0700). A journal that cannot be opened leaves nothing behind: the
// directories created for it are removed (the sqlite backend itself creates
// nothing beside a file it refuses).
func (e *env) openJournal(ctx context.Context, cfg *fileConfig) (journal.Journal, error) {
	url := e.journalURL(cfg)
	dir, err := e.journalDir(cfg)
	if err != nil {
		return nil, err
	}
	undo := func() {}
	if dir != "" {
		if undo, err = ensureDir("journal directory", dir); err != nil {
			return nil, err
		}
	}
	j, err := journal.Open(ctx, url)
	if err != nil {
		undo()
		return nil, &dirError{journalProblem(url, err)}
	}
	return j, nil
}

// journalProblem says in one sentence why the journal at url cannot be
// used. The sqlite backend's errors name the file already; other URLs are
// shown without their password.
func journalProblem(url string, err error) string {
	msg := err.Error()
	if _, ok := strings.CutPrefix(url, "sqlite:"); ok {
		return "cannot use the journal: " + strings.TrimPrefix(msg, "journal/sqlite: ")
	}
	return fmt.Sprintf("cannot use the journal %s: %s", redactURL(url), msg)
}

// redactURL hides the password of a journal URL (postgres://user:pw@host/db).
func redactURL(s string) string {
	u, err := neturl.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// clientKey loads the CLI's SSH key, generating it on first use (0600).
func (e *env) clientKey() (ssh.KeyPair, error) {
	if _, err := ensureDir("state directory", e.stateDir); err != nil {
		return ssh.KeyPair{}, err
	}
	path := e.keyPath()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		kp, gerr := ssh.GenerateKey()
		if gerr != nil {
			return kp, gerr
		}
		werr := ssh.WritePrivateKey(path, kp)
		if werr == nil {
			return kp, nil
		}
		if !errors.Is(werr, ssh.ErrKeyExists) {
			return kp, fmt.Errorf("ssh key %s: %w", path, werr)
		}
		// Another gpuprov process generated it first: use theirs.
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return ssh.KeyPair{}, fmt.Errorf("ssh key: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return ssh.KeyPair{}, fmt.Errorf("ssh key %s: %w", path, err)
	}
	return ssh.KeyPair{Signer: signer, PrivatePEM: b, AuthorizedKey: ssh.AuthorizedKey(signer.PublicKey())}, nil
}

func (e *env) keyPath() string { return filepath.Join(e.stateDir, "id_ed25519") }

func (e *env) logger() *slog.Logger {
	if !e.verbose {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// session is an open journal and a Provisioner over the configured
// providers. Close it.
type session struct {
	cfg *fileConfig
	j   journal.Journal
	p   *gpuprov.Provisioner
	key ssh.KeyPair
}

// sessionOptions are the extra options a command adds.
type sessionOptions struct {
	events []func(gpuprov.Event)
	joiner gpuprov.Joiner
	extra  []gpuprov.Option // e.g. up --wait-poll
}

// open loads and checks the config, builds every provider once without the
// journal (so a bad provider table is reported before anything is created),
// then opens the journal and the Provisioner.
func (e *env) open(ctx context.Context, so sessionOptions) (*session, error) {
	cfg, err := loadConfig(e.configPath)
	if err != nil {
		return nil, err
	}
	if err := cfg.requireProviders(e.configPath); err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return e.openChecked(ctx, cfg, so)
}

// check builds every provider with a throwaway installation id: Factories
// validate their config without touching the network.
func (c *fileConfig) check() error {
	for _, pc := range c.Providers {
		if _, err := provider.Build(pc.Type, provider.Settings{Name: pc.Name, Decode: c.decoder(pc.Name)}); err != nil {
			var ce *configError
			if errors.As(err, &ce) {
				return ce
			}
			return configErrorf("%s:%d: [%s]: %v", c.Path, pc.Line, pc.Name, err)
		}
	}
	return nil
}

func (e *env) openChecked(ctx context.Context, cfg *fileConfig, so sessionOptions) (*session, error) {
	// Check both directories before creating either, so that a bad one
	// leaves nothing behind.
	jdir, err := e.journalDir(cfg)
	if err != nil {
		return nil, err
	}
	if jdir != "" {
		if err := checkDir("journal directory", jdir); err != nil {
			return nil, err
		}
	}
	if err := checkDir("state directory", e.stateDir); err != nil {
		return nil, err
	}
	// The journal first: one that cannot be used (a foreign file, another
	// program's database) must not leave a new key behind.
	j, err := e.openJournal(ctx, cfg)
	if err != nil {
		return nil, err
	}
	key, err := e.clientKey()
	if err != nil {
		j.Close()
		return nil, err
	}
	log := e.logger()
	opts := []gpuprov.Option{
		gpuprov.WithLogger(log),
		gpuprov.WithSSH(sshUser, []string{key.AuthorizedKey}, true),
		gpuprov.WithConnector(&gpuprov.SSHConnector{Signer: key.Signer, Logger: log}),
	}
	for _, pc := range cfg.Providers {
		opts = append(opts, gpuprov.WithRegistryProvider(pc.Type, provider.Settings{
			Name: pc.Name, Decode: cfg.decoder(pc.Name), Logger: log.With("provider", pc.Name)}))
	}
	for _, sink := range so.events {
		opts = append(opts, gpuprov.WithEvents(sink))
	}
	opts = append(opts, so.extra...)
	if so.joiner != nil {
		opts = append(opts, gpuprov.WithJoiner(so.joiner))
	}
	p, err := gpuprov.New(j, opts...)
	if err != nil {
		j.Close()
		return nil, configErrorf("%v", err)
	}
	return &session{cfg: cfg, j: j, p: p, key: key}, nil
}

func (s *session) Close() error {
	return errors.Join(s.p.Close(), s.j.Close())
}

func (s *session) signer() gossh.Signer { return s.key.Signer }
