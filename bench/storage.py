"""Storage folders' throughput through the manager, next to a plain local copy, and the
manager's peak memory growth while it moves the file.

A 1 GiB file of random bytes (``--size``) is uploaded to a folder through the SDK (streamed
to `gpuslice manager serve`, a process of its own, which writes it into the folder) and
downloaded back (streamed from the folder); each is timed next to `cp --reflink=never` of
the same file on the same filesystem, alternately (``--runs``), so both see the same load.
The manager's peak resident memory during each transfer comes from its /proc VmHWM (reset
before each transfer through clear_refs, as root; otherwise sampled every 20 ms).

    python bench/storage.py [--size 1g] [--runs 3] [--short]

Targets: upload and download ≥ 0.5× the local copy; memory growth < 100 MiB.
Last line: ``upload_mib_s=… download_mib_s=… copy_mib_s=… upload_ratio=… download_ratio=…
peak_growth_mib=…``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from _local import parse_args

from gpuslice.client import Client
from gpuslice.common.resources import MiB, parse_mem

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1g", help="The file's size (default 1g).")
    parser.add_argument("--runs", type=int, default=3, help="Transfers of each kind.")
    args = parse_args(parser, {"size": "16m", "runs": 1})
    size = parse_mem(args.size)
    with tempfile.TemporaryDirectory(prefix="gpuslice-bench-storage-", dir="/var/tmp") as tmp:
        work = Path(tmp)
        source = work / "source.bin"
        _random_file(source, size)
        manager, client = _start_manager(work)
        try:
            _bench(client, manager.pid, work, source, size, args.runs)
        finally:
            client.close()
            manager.terminate()
            manager.wait(30)


def _bench(client: Client, pid: int, work: Path, source: Path, size: int, runs: int) -> None:
    folder = client.create_folder("bench")
    copies, ups, downs, peaks = [], [], [], []
    baseline = _rss(pid)
    for i in range(runs):
        target, name, back = work / f"copy-{i}.bin", f"big-{i}.bin", work / f"back-{i}.bin"
        copies.append(_timed(subprocess.run, ["cp", "--reflink=never", str(source), str(target)],
                             check=True))
        target.unlink()
        with _Peak(pid) as peak:
            ups.append(_timed(client.upload_file, folder.id, source, name))
        peaks.append(peak.value - baseline)
        with _Peak(pid) as peak:
            downs.append(_timed(client.download_file, folder.id, name, back))
        peaks.append(peak.value - baseline)
        if back.stat().st_size != size:
            raise SystemExit(f"downloaded {back.stat().st_size} bytes of {size}")
        back.unlink()
        client.delete_file(folder.id, name)
    mib = size / MiB
    copy, up, down = (mib / statistics.median(t) for t in (copies, ups, downs))
    growth = max(peaks) / MiB
    print(f"{mib:.0f} MiB x {runs}: local copy {copy:.0f} MiB/s, upload {up:.0f} MiB/s "
          f"({up / copy:.2f}x), download {down:.0f} MiB/s ({down / copy:.2f}x); manager peak "
          f"memory growth {growth:.1f} MiB (baseline {baseline / MiB:.0f} MiB)")
    print(f"upload_mib_s={up:.0f} download_mib_s={down:.0f} copy_mib_s={copy:.0f} "
          f"upload_ratio={up / copy:.2f} download_ratio={down / copy:.2f} "
          f"peak_growth_mib={growth:.1f}")


def _random_file(path: Path, size: int) -> None:
    with open(path, "wb") as out:
        left = size
        while left:
            piece = os.urandom(min(left, 8 * MiB))
            out.write(piece)
            left -= len(piece)


def _start_manager(work: Path) -> tuple[subprocess.Popen[bytes], Client]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    env |= {"GPUSLICE_DATA_DIR": str(work / "data"), "GPUSLICE_STORAGE__USAGE_INTERVAL": "3600"}
    manager = subprocess.Popen([GPUSLICE, "manager", "serve", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/api/v1/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if manager.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the manager did not start")
        time.sleep(0.2)
    fields = dict(line.split(": ", 1) for line in
                  (work / "data" / "admin-credentials").read_text().splitlines() if ": " in line)
    client = Client(url, timeout=600)
    client.login(fields["username"], fields["password"])
    return manager, client


def _timed(op: Callable[..., object], *args: Any, **kwargs: Any) -> float:
    started = time.perf_counter()
    op(*args, **kwargs)
    return time.perf_counter() - started


def _rss(pid: int) -> int:
    return _status(pid, "VmRSS")


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"no {key} for process {pid}")


class _Peak:
    """The process's peak resident memory while the block runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.value = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> _Peak:
        self.exact = _reset_peak(self.pid)
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sampler.join()
        if self.exact:
            self.value = max(self.value, _status(self.pid, "VmHWM"))

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.value = max(self.value, _rss(self.pid))
            time.sleep(0.02)


def _reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # 5: reset the peak RSS (VmHWM)
    except OSError:
        return False
    return True


if __name__ == "__main__":
    if shutil.which("cp") is None:
        raise SystemExit("needs cp (coreutils)")
    main()
