#!/usr/bin/env bash
# Installs and starts what gpuslice needs on a Debian host, idempotently:
#   Docker Engine (docker.io) and debootstrap (to build session images without a registry);
#   npm (the browser terminal's xterm.js comes from the npm registry: tools/build-web.sh);
#   iptables (the agent fences session networks with it) and iproute2; OpenSSH's client and
#   rsync (`gpuslice session ssh`, the SSH tests); a C compiler (gcc: the
#   agent builds its hard-cap shim with it when HAMi or MPS caps are on);
#   with --postgres also what the test suite needs: PostgreSQL, with a `gpuslice` role and
#   database, faketime (libfaketime: the clock-jump test moves one process's clock), HAProxy
#   (the load balancer of the multi-node test; not started here) and systemd-analyze (package
#   systemd; nothing is started) to check the service units;
#   with --prometheus also the Prometheus server binary (the monitoring tests start their own
#   on a free port; the package's own service is not left running);
#   with --browser also headless Chromium (the tests drive the terminal and JupyterLab in it);
#   with --idp also the test identity providers: slapd and ldap-utils (the LDAP tests run
#   their own slapd; the system one is neither configured nor started) and the npm packages
#   of the test OpenID provider (`npm ci` in tests/idp: oidc-provider and its Node 22).
# Runs as root, or through sudo.
set -euo pipefail

want_pg=0
want_prometheus=0
want_browser=0
want_idp=0
for arg in "$@"; do
  case "$arg" in
    --postgres) want_pg=1 ;;
    --prometheus) want_prometheus=1 ;;
    --browser) want_browser=1 ;;
    --idp) want_idp=1 ;;
    *) echo "usage: $0 [--postgres] [--prometheus] [--browser] [--idp]" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

log() { printf '[host-setup] %s\n' "$*"; }

packages=()
command -v dockerd >/dev/null 2>&1 || packages+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || packages+=(debootstrap)
command -v npm >/dev/null 2>&1 || packages+=(npm)
command -v iptables >/dev/null 2>&1 || packages+=(iptables)
command -v ip >/dev/null 2>&1 || packages+=(iproute2)
command -v cc >/dev/null 2>&1 || packages+=(gcc)
# OpenSSH's client and rsync: `gpuslice session ssh`, and the SSH tests (ssh, scp, sftp, rsync).
command -v ssh >/dev/null 2>&1 || packages+=(openssh-client)
command -v rsync >/dev/null 2>&1 || packages+=(rsync)
if [ "$want_pg" = 1 ] && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  packages+=(postgresql)
fi
if [ "$want_browser" = 1 ] && ! command -v chromium-headless-shell >/dev/null 2>&1 \
    && ! command -v chromium >/dev/null 2>&1; then
  packages+=(chromium-headless-shell)
fi
if [ "$want_pg" = 1 ] && ! command -v systemd-analyze >/dev/null 2>&1; then
  packages+=(systemd)
fi
if [ "$want_pg" = 1 ] && ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
  packages+=(haproxy)
fi
if [ "$want_pg" = 1 ] && ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; then
  packages+=(faketime)
fi
if [ "${#packages[@]}" -gt 0 ]; then
  log "installing ${packages[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${packages[@]}" >/dev/null
fi
if [ "$want_prometheus" = 1 ] && ! command -v prometheus >/dev/null 2>&1; then
  log "installing prometheus (for the monitoring tests)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    prometheus >/dev/null
  # Installed for the tests, which run their own: the package's service need not run.
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi

docker_up() { $SUDO docker version >/dev/null 2>&1; }
if ! docker_up; then
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    log "starting docker (systemd)"
    $SUDO systemctl start docker
  else
    log "starting dockerd in the background (log: /var/log/gpuslice-dockerd.log)"
    $SUDO sh -c 'setsid nohup dockerd >/var/log/gpuslice-dockerd.log 2>&1 < /dev/null &'
  fi
  for _ in $(seq 1 60); do docker_up && break; sleep 1; done
  docker_up || { log "dockerd did not start; see /var/log/gpuslice-dockerd.log"; exit 1; }
fi
log "docker engine: $($SUDO docker version --format '{{.Server.Version}}')"

if [ "$want_pg" = 1 ]; then
  version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
  if ! $SUDO pg_lsclusters -h | grep -q .; then
    $SUDO pg_createcluster "$version" main >/dev/null
  fi
  cluster=$($SUDO pg_lsclusters -h | head -n 1)
  read -r cver cname cport cstatus _ <<<"$cluster"
  if [ "$cstatus" != "online" ]; then
    log "starting PostgreSQL $cver/$cname"
    $SUDO pg_ctlcluster "$cver" "$cname" start
  fi
  as_postgres() { if [ -n "$SUDO" ]; then sudo -u postgres "$@"; else runuser -u postgres -- "$@"; fi; }
  psql_admin() { as_postgres psql -p "$cport" -qAtc "$1"; }
  if [ "$(psql_admin "SELECT 1 FROM pg_roles WHERE rolname='gpuslice'")" != "1" ]; then
    psql_admin "CREATE ROLE gpuslice LOGIN SUPERUSER PASSWORD 'gpuslice'"
  fi
  if [ "$(psql_admin "SELECT 1 FROM pg_database WHERE datname='gpuslice'")" != "1" ]; then
    psql_admin "CREATE DATABASE gpuslice OWNER gpuslice"
  fi
  log "postgresql: postgresql+asyncpg://gpuslice:gpuslice@127.0.0.1:${cport}/gpuslice"
fi

if [ "$want_idp" = 1 ]; then
  if [ ! -x /usr/sbin/slapd ] || ! command -v ldapsearch >/dev/null 2>&1; then
    log "installing slapd and ldap-utils (for the LDAP tests; the system slapd stays off)"
    # No directory of the package's own (the tests make theirs), no service started (a
    # policy-rc.d for the install's length, unless the host has one), and needrestart only
    # lists what it would restart: it must never restart Docker under running sessions.
    echo "slapd slapd/no_configuration boolean true" | $SUDO debconf-set-selections
    own_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
      $SUDO chmod 755 /usr/sbin/policy-rc.d
      own_policy=1
    fi
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=l \
      apt-get install -y -qq --no-install-recommends slapd ldap-utils >/dev/null
    if [ "$own_policy" = 1 ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
  fi
  # The test OpenID provider's packages, as tests/idp/package-lock.json pins them (the
  # registry is npm's configured one); nothing to do when they are already installed.
  idp=$(cd "$(dirname "$0")/../tests/idp" && pwd)
  if ! cmp -s "$idp/package-lock.json" "$idp/node_modules/.gpuslice-lock" 2>/dev/null; then
    log "npm ci in tests/idp (oidc-provider, Node 22)"
    (cd "$idp" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$idp/package-lock.json" "$idp/node_modules/.gpuslice-lock"
  fi
  log "test identity providers: $(/usr/sbin/slapd -VV 2>&1 | head -n 1 | sed 's/.*slapd/slapd/;s/ (.*//'), oidc-provider $(node -p "require('$idp/node_modules/oidc-provider/package.json').version")"
fi
