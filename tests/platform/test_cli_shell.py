"""`gpuslice session shell` on a real terminal (a pty), against `gpuslice up`."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time

import pytest

from tests.platform.conftest import GPUSLICE, Platform
from tests.waits import scaled

pytestmark = pytest.mark.docker


def test_keys_typed_while_the_shell_connects_reach_the_shell(
    shared_platform: Platform, base_image: str,
) -> None:
    plat = shared_platform
    plat.session("typeahead", base_image, "--cpu", "0.5", "--mem", "256m")
    main, child = pty.openpty()
    shell = subprocess.Popen([GPUSLICE, "session", "shell", "typeahead"], stdin=child,
                             stdout=child, stderr=child, env=plat.env, start_new_session=True)
    os.close(child)
    try:
        # typed at once, as a person does after pressing Enter: long before the shell is there
        os.write(main, b"echo typed-$((40+2))-ahead\n")
        expect(main, b"typed-42-ahead")  # the shell's output, not the echo of the keys
        os.write(main, b"exit 5\n")
        assert shell.wait(scaled(30)) == 5
    finally:
        if shell.poll() is None:
            shell.kill()
        os.close(main)


def expect(fd: int, wanted: bytes, timeout: float = 30.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + scaled(timeout)
    while wanted not in seen:
        assert time.monotonic() < deadline, f"no {wanted!r} in {seen[-1000:]!r}"
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the command ended: its terminal closed
                break
    assert wanted in seen, f"no {wanted!r} in {seen[-1000:]!r}"
    return seen
