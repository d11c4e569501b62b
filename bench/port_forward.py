"""Port forwarding next to a direct TCP connection: bulk throughput both ways.

Platform: `gpuslice up` (manager + local agent in one process, real Docker, mock GPU) in a
subprocess, and a session of the base image running a small server (standard library): a
connection that sends ``get N`` gets N bytes, one that sends ``put N`` and N bytes gets
``ok``. Direct: the server at its container's address, from this machine. Forwarded:
`gpuslice session port-forward` (a process, as a user runs it) listening here; each connection
crosses the CLI, the manager's WebSocket and the link to the agent (in memory: `gpuslice up`
runs the agent in the manager's process). Both are measured in
alternating rounds so that both see the same machine load; each figure is the median.

    python bench/port_forward.py [--rounds 3] [--size-mib 200] [--short]

Floor: two relays in a row, as the CLI and the manager are, each the least a Python hop does
(``bench/_floors.py tcp``: raw TCP, no framing, no login), measured in the same rounds;
``floor_ratio`` is the smaller of its two directions' ratios to direct.

Last line: ``download_mib_s=… download_mib_s_direct=… upload_mib_s=… upload_mib_s_direct=…
throughput_ratio=… download_mib_s_floor=… upload_mib_s_floor=… floor_ratio=… intact=1``;
``throughput_ratio`` is the smaller of the two directions' forwarded/direct ratios. Target:
throughput_ratio ≥ 0.5. ``intact``: every transfer carried all its bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _floors import running
from _local import forget_node, free_port, parse_args

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.proxy import _address  # noqa: E402
from bench.start_latency import GPUSLICE, start_platform  # noqa: E402
from gpuslice.client import Client  # noqa: E402
from gpuslice.common.images import DEFAULT_SESSION_IMAGE  # noqa: E402

MiB = 1024 * 1024
PORT = 5001
SERVER = """
import socket, threading
BLOCK = bytes(1 << 20)
def serve(conn):
    with conn, conn.makefile("rb") as f:
        verb, size = f.readline().split()
        left = int(size)
        if verb == b"get":
            while left:
                left -= conn.send(BLOCK[:min(left, len(BLOCK))])
        else:
            while left:
                left -= len(f.read1(min(left, 1 << 20)))
            conn.sendall(b"ok")
server = socket.create_server(("0.0.0.0", PORT))
while True:
    threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()
""".replace("PORT", str(PORT))
LAUNCH = """
import socket, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1]], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", PORT), 1).close()
        break
    except OSError:
        time.sleep(0.1)
""".replace("PORT", str(PORT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="transfers each way, each path")
    parser.add_argument("--size-mib", type=int, default=200, help="bytes per transfer")
    parser.add_argument("--image", default=DEFAULT_SESSION_IMAGE, help="session image")
    args = parse_args(parser, {"rounds": 1, "size_mib": 16})
    node = f"bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        proc, client = start_platform(Path(tmp), free_port(), node)
        try:
            run(client, Path(tmp), args)
        finally:
            proc.terminate()
            proc.wait(30)
            forget_node(node)


def run(client: Client, data_dir: Path, args: argparse.Namespace) -> None:
    session = client.create_sessions(image=args.image, cpu=1, mem="512m", name="bench")[0]
    session = client.wait(session.id, {"RUNNING"}, timeout=120)
    done = client.exec(session.id, ["python3", "-c", LAUNCH, SERVER])
    assert done.exit_code == 0, done.stderr
    direct = (asyncio.run(_address(session.id)), PORT)
    local = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    env["GPUSLICE_CLIENT_CONFIG"] = str(data_dir / "client.json")
    forwarder = subprocess.Popen(
        [GPUSLICE, "session", "port-forward", session.id, f"{local}:{PORT}"], env=env,
        stderr=subprocess.PIPE, text=True)
    try:
        assert forwarder.stderr is not None
        line = forwarder.stderr.readline()
        assert "Forwarding from" in line, line
        # The floor: two relays in a row, as the CLI and the manager are.
        with running("tcp", f"{direct[0]}:{direct[1]}") as second, \
                running("tcp", f"127.0.0.1:{second}") as first:
            figures = measure(direct, ("127.0.0.1", local), ("127.0.0.1", first),
                              args.size_mib * MiB, args.rounds)
    finally:
        forwarder.terminate()
        forwarder.wait(30)
    print(json.dumps(figures, indent=2))
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


def measure(direct: tuple[str, int], forwarded: tuple[str, int], floor: tuple[str, int],
            size: int, rounds: int) -> dict[str, float | int]:
    rates: dict[str, list[float]] = {f"{verb}{path}": [] for verb in ("get", "put")
                                     for path in ("", "_direct", "_floor")}
    transfer(forwarded, "get", MiB)  # warm: the CLI, the manager's route, the agent's link
    transfer(floor, "get", MiB)
    for _ in range(rounds):
        for verb in ("get", "put"):
            rates[f"{verb}_direct"].append(transfer(direct, verb, size))
            rates[verb].append(transfer(forwarded, verb, size))
            rates[f"{verb}_floor"].append(transfer(floor, verb, size))
    median = {k: statistics.median(v) for k, v in rates.items()}
    return {
        "download_mib_s": round(median["get"], 1),
        "download_mib_s_direct": round(median["get_direct"], 1),
        "upload_mib_s": round(median["put"], 1),
        "upload_mib_s_direct": round(median["put_direct"], 1),
        "throughput_ratio": round(min(median["get"] / median["get_direct"],
                                      median["put"] / median["put_direct"]), 2),
        "download_mib_s_floor": round(median["get_floor"], 1),
        "upload_mib_s_floor": round(median["put_floor"], 1),
        "floor_ratio": round(min(median["get_floor"] / median["get_direct"],
                                 median["put_floor"] / median["put_direct"]), 2),
        "intact": 1,  # transfer() asserts every byte came
    }


def transfer(where: tuple[str, int], verb: str, size: int) -> float:
    """MiB/s of one transfer of ``size`` bytes, from connecting to the last byte."""
    block = bytes(MiB)
    started = time.perf_counter()
    with socket.create_connection(where, timeout=120) as conn:
        conn.sendall(f"{verb} {size}\n".encode())
        if verb == "get":
            got = 0
            while chunk := conn.recv(MiB):
                got += len(chunk)
            assert got == size, f"{got} of {size} bytes came"
        else:
            left = size
            while left:
                left -= conn.send(block[:min(left, MiB)])
            assert conn.recv(2) == b"ok", "the server did not get every byte"
    return size / MiB / (time.perf_counter() - started)


if __name__ == "__main__":
    if os.geteuid() != 0 and not os.access("/var/run/docker.sock", os.W_OK):
        raise SystemExit("needs the Docker Engine (run as root or a docker group member)")
    main()
