#!/usr/bin/env bash
# Installs and starts what gpuslice needs on a Debian host, idempotently:
#   Docker Engine (docker.io) and debootstrap (to build session images without a registry);
#   with --postgres also what the test suite needs: PostgreSQL, with a `gpuslice` role and
#   database, and faketime (libfaketime: the clock-jump test moves one process's clock).
# Runs as root, or through sudo.
set -euo pipefail

want_pg=0
for arg in "$@"; do
  case "$arg" in
    --postgres) want_pg=1 ;;
    *) echo "usage: $0 [--postgres]" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

log() { printf '[host-setup] %s\n' "$*"; }

packages=()
command -v dockerd >/dev/null 2>&1 || packages+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || packages+=(debootstrap)
if [ "$want_pg" = 1 ] && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  packages+=(postgresql)
fi
if [ "$want_pg" = 1 ] && ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; then
  packages+=(faketime)
fi
if [ "${#packages[@]}" -gt 0 ]; then
  log "installing ${packages[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${packages[@]}" >/dev/null
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
