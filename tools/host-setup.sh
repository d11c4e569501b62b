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
#   with --browser also headless Chromium (the tests drive the terminal and JupyterLab in it).
# Runs as root, or through sudo.
set -euo pipefail

want_pg=0
want_prometheus=0
want_browser=0
for arg in "$@"; do
  case "$arg" in
    --postgres) want_pg=1 ;;
    --prometheus) want_prometheus=1 ;;
    --browser) want_browser=1 ;;
    *) echo "usage: $0 [--postgres] [--prometheus] [--browser]" >&2; exit 2 ;;
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
