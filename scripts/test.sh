#!/usr/bin/env bash
# Runs gpuprov's whole test suite on a fresh machine: installs what the tests
# need when it is missing (OpenSSH's sshd and sudo for the ssh tests, curl for the
# simulated instances' metadata endpoint, the PostgreSQL
# server binaries for the journal/postgres, replica and fleet tests, which
# start a private server of their own on loopback), then vets and tests
# every package with the race detector. Set GPUPROV_TEST_POSTGRES to a
# server's URL to run those tests against it instead.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
[ -x /usr/sbin/sshd ] || need_pkgs+=(openssh-server)
# sudo: the ssh tests cancel a command run through `sudo -n` as an
# unprivileged login they create.
command -v sudo >/dev/null || need_pkgs+=(sudo)
# curl: the simulated instances read their metadata endpoint (interruption
# notices) with it, as the clouds' machines do.
command -v curl >/dev/null || need_pkgs+=(curl)
if [ -z "${GPUPROV_TEST_POSTGRES:-}" ] && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && ! command -v initdb >/dev/null; then
  need_pkgs+=(postgresql)
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing ${need_pkgs[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    echo "missing ${need_pkgs[*]}: install it (Debian/Ubuntu: sudo apt-get install ${need_pkgs[*]}); tests that need it are skipped" >&2
  fi
fi

go vet ./...
# staticcheck, pinned: unused code and the checks go vet does not make
# (go run fetches it through the module proxy on a fresh machine).
staticcheck="honnef.co/go/tools/cmd/staticcheck@v0.8.2"
go run "$staticcheck" ./...
go test -race -count=1 -timeout 15m ./...
# examples/scheduler is a module of its own, outside gpuprov's import path:
# it builds only against the public API, and its tests run on the public
# in-process sim.
(cd examples/scheduler && go vet ./... && go run "$staticcheck" ./... && go test -race -count=1 -timeout 5m ./...)
