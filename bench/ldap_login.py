"""LDAP sign-in latency (issue 42) against a local password login, in the same run.

    python bench/ldap_login.py [--logins 200] [--short]

Starts a real slapd (tests/idp/ldap.py: the test directory, with memberof and ppolicy) and
`gpuslice manager serve` (SQLite in a temporary directory) as processes, the manager's
auth.ldap pointed at the directory (a service account searches ou=people; gpu-users may sign
in). Then, one after another, --logins password logins of a local user (argon2, the manager's
default cost) and --logins of the directory user alice (a search as the service account, a bind
as alice, her groups, the sign-in's database writes), interleaved so that both see the same
load. Password checks run at nice 0 (auth.password_check_nice): on a shared machine nice 19
would measure the other tenants. Last line: ``ldap_p50_ms=… ldap_p99_ms=… local_p50_ms=…
local_p99_ms=… ratio_p50=… logins=… all_ok=yes|no``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the directory lives in tests/
from _local import admin_password, free_port, parse_args, wait_live  # noqa: E402

from tests.idp.ldap import ldap_directory  # noqa: E402

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))


def main() -> None:
    args = _parse()
    with tempfile.TemporaryDirectory() as tmp, ldap_directory(Path(tmp) / "ldap") as directory:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        data = Path(tmp) / "data"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")} | {
            "GPUSLICE_DATA_DIR": str(data), "GPUSLICE_AUTH__PASSWORD_CHECK_NICE": "0",
            "GPUSLICE_AUTH__LDAP__URL": directory.url,
            "GPUSLICE_AUTH__LDAP__BIND_DN": directory.service_dn,
            "GPUSLICE_AUTH__LDAP__BIND_PASSWORD": directory.service_password,
            "GPUSLICE_AUTH__LDAP__USER_BASE": directory.people_dn,
            "GPUSLICE_AUTH__LDAP__ALLOWED_GROUPS": json.dumps(["gpu-users"]),
            # every login of the run counts as a failure until it succeeds: never throttled
            "GPUSLICE_AUTH__LOGIN_FAILURES_PER_ADDRESS": "100000"}
        manager = subprocess.Popen([GPUSLICE, "manager", "serve", "--port", str(port)],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with httpx.Client(base_url=url, timeout=60) as http:
                wait_live(url, manager)
                _local_user(http, data)
                ldap, local, ok = _logins(http, args.logins)
        finally:
            manager.send_signal(signal.SIGINT)
            manager.wait(30)
    l50, l99, p50, p99 = _pct(ldap, 50), _pct(ldap, 99), _pct(local, 50), _pct(local, 99)
    print(f"ldap (alice, search + bind + groups + sign-in): {len(ldap)} logins, "
          f"p50 {l50:.2f} ms, p99 {l99:.2f} ms, mean {statistics.mean(ldap):.2f} ms")
    print(f"local (argon2): {len(local)} logins, p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
          f"mean {statistics.mean(local):.2f} ms")
    print(f"ldap_p50_ms={l50:.2f} ldap_p99_ms={l99:.2f} local_p50_ms={p50:.2f} "
          f"local_p99_ms={p99:.2f} ratio_p50={l50 / p50:.2f} logins={len(ldap)} "
          f"all_ok={'yes' if ok else 'no'}")


def _local_user(http: httpx.Client, data: Path) -> None:
    r = http.post("/api/v1/auth/login",
                  json={"username": "admin", "password": admin_password(data)})
    r.raise_for_status()
    token = r.json()["access_token"]
    r = http.post("/api/v1/users", json={"username": "lucy", "password": "lucy-password"},
                  headers={"Authorization": f"Bearer {token}"})
    r.raise_for_status()


def _logins(http: httpx.Client, count: int) -> tuple[list[float], list[float], bool]:
    ldap: list[float] = []
    local: list[float] = []
    ok = True
    # the first of each (connections, the directory user's provisioning) is not timed
    for n in range(count + 1):
        for name, times in (("alice", ldap), ("lucy", local)):
            started = time.perf_counter()
            r = http.post("/api/v1/auth/login",
                          json={"username": name, "password": f"{name}-password"})
            elapsed = (time.perf_counter() - started) * 1000
            ok = ok and r.status_code == 200
            if n:
                times.append(elapsed)
    return ldap, local, ok


def _pct(values: list[float], pct: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logins", type=int, default=200, help="logins of each kind")
    return parse_args(parser, {"logins": 10})


if __name__ == "__main__":
    main()
