"""What a user of the guide does first in a session, in the images every node has: `%pip
install` then `import` in one kernel, NumPy and friends in the notebook image, `wget`/`curl`,
and `sudo` (off in one line by default; real where the node's admin allows it).

Sessions are made by the agent's runtime from the real container spec (unprivileged user,
no capabilities, no-new-privileges unless ``allow_sudo``), on the real Docker Engine. Nothing
is downloaded: the wheel and the Debian package are built in the session itself.
"""

from __future__ import annotations

import pytest

from gpuslice.agent.runtime import DockerRuntime
from gpuslice.common.images import DEFAULT_SESSION_IMAGE
from tests.dockerd import base_image, docker_ready
from tests.images.sessions import node_runtime, require_image, session_spec

__all__ = ["base_image", "docker_ready", "node_runtime"]
pytestmark = pytest.mark.docker

NOTEBOOK = "gpuslice/notebook:4.2.5"
BUILD_NOTEBOOK = "run scripts/build-images.sh (CI does) or `gpuslice image build notebook`"

# A wheel of a package no image has, written with the standard library only (no index).
MAKE_WHEEL = r'''
import base64, hashlib, zipfile
files = {
    "tinypkg/__init__.py": b"VALUE = 'tinypkg 0.1 imported'\n",
    "tinypkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
    "tinypkg-0.1.dist-info/WHEEL":
        b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
def line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"
record = "\n".join(line(n, d) for n, d in files.items()) + "\ntinypkg-0.1.dist-info/RECORD,,\n"
with zipfile.ZipFile("/tmp/tinypkg-0.1-py3-none-any.whl", "w") as wheel:
    for name, data in files.items():
        wheel.writestr(name, data)
    wheel.writestr("tinypkg-0.1.dist-info/RECORD", record)
'''
WHEEL = "/tmp/tinypkg-0.1-py3-none-any.whl"
# Two cells of one notebook, run by IPython in one process as a kernel runs them.
CELLS = f"%pip install --no-index --no-deps {WHEEL}\nimport tinypkg\nprint(tinypkg.VALUE)\n"


async def _run(runtime: DockerRuntime, session_id: str, script: str,
               timeout: float = 120) -> tuple[int, str, str]:
    done = await runtime.exec(session_id, ["bash", "-c", script], timeout=timeout)
    return done.exit_code, done.stdout, done.stderr


async def test_pip_install_then_import_works_in_the_same_kernel(
    node_runtime: DockerRuntime,
) -> None:
    image = await require_image(NOTEBOOK, BUILD_NOTEBOOK)
    spec = session_spec(node_runtime, image)
    await node_runtime.ensure_running(spec)
    code, out, err = await _run(node_runtime, spec.session_id, (
        f"python3 -c {_quote(MAKE_WHEEL)} && printf %s {_quote(CELLS)} > /tmp/cells.ipy && "
        "ipython --no-banner /tmp/cells.ipy"))
    assert code == 0, f"{out}\n{err}"
    assert "Successfully installed tinypkg-0.1" in out
    assert "ModuleNotFoundError" not in out + err
    assert out.rstrip().endswith("tinypkg 0.1 imported")


async def test_the_notebook_image_has_the_scientific_stack(node_runtime: DockerRuntime) -> None:
    image = await require_image(NOTEBOOK, BUILD_NOTEBOOK)
    spec = session_spec(node_runtime, image, gpu=False)
    await node_runtime.ensure_running(spec)
    code, out, err = await _run(node_runtime, spec.session_id, (
        "python3 -c 'import numpy, pandas, matplotlib, sklearn; "
        "print(numpy.__version__, pandas.__version__, matplotlib.__version__, "
        "sklearn.__version__)' && python3 /opt/gpuslice/examples/train_digits.py"))
    assert code == 0, err
    versions, *example = out.splitlines()
    assert versions == "2.1.3 2.2.3 3.9.2 1.5.2"
    assert example[0] == "scikit-learn 1.5.2"
    assert float(example[-1].removeprefix("test accuracy ")) > 0.9


async def test_sudo_is_off_by_default_and_says_so_in_one_line(
    base_image: str, node_runtime: DockerRuntime,
) -> None:
    assert base_image == DEFAULT_SESSION_IMAGE
    spec = session_spec(node_runtime, base_image, gpu=False)
    await node_runtime.ensure_running(spec)
    code, out, err = await _run(node_runtime, spec.session_id,
                                "sudo pip install numpy")
    assert code == 1 and out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("sudo: off in this session (the admin has not allowed sudo")
    assert "pip install --user PACKAGE" in err
    code, out, _ = await _run(node_runtime, spec.session_id,
                              "wget --version | head -1; curl --version | head -1")
    assert code == 0
    assert out.startswith("GNU Wget") and "\ncurl " in out


async def test_sudo_installs_system_packages_where_the_admin_allows_it(
    base_image: str, node_runtime: DockerRuntime,
) -> None:
    spec = session_spec(node_runtime, base_image, gpu=False, allow_sudo=True)
    await node_runtime.ensure_running(spec)
    # A Debian package built in the session (no mirror needed), installed with sudo dpkg as
    # apt would; then the guide's `sudo pip install` into the system's Python.
    code, out, err = await _run(node_runtime, spec.session_id, (
        "set -e; mkdir -p /tmp/hello/DEBIAN /tmp/hello/usr/bin; "
        "printf 'Package: gpuslice-hello\\nVersion: 1.0\\nArchitecture: all\\n"
        "Maintainer: test <t@example.invalid>\\nDescription: test\\n' "
        "> /tmp/hello/DEBIAN/control; "
        "printf '#!/bin/sh\\necho hello from a system package\\n' > /tmp/hello/usr/bin/hello-sys; "
        "chmod 755 /tmp/hello/usr/bin/hello-sys; "
        "dpkg-deb --root-owner-group --build /tmp/hello /tmp/hello.deb > /dev/null; "
        "sudo dpkg -i /tmp/hello.deb > /dev/null; hello-sys; "
        f"python3 -c {_quote(MAKE_WHEEL)}; "
        f"sudo pip install -q --no-index --no-deps {WHEEL} 2>/dev/null; "
        "python3 -c 'import tinypkg, sys; print(tinypkg.__file__)'; id -u; sudo id -u"))
    assert code == 0, f"{out}\n{err}"
    assert out.splitlines() == [
        "hello from a system package",
        "/usr/local/lib/python3.11/dist-packages/tinypkg/__init__.py",
        "1000",  # the session still runs as the unprivileged user
        "0",
    ]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


async def test_the_base_image_carries_an_ssh_server_but_runs_none_and_shares_no_host_key(
    base_image: str, node_runtime: DockerRuntime,
) -> None:
    """sshd, its SFTP server and rsync are there for `gpuslice session ssh` (the agent runs
    `sshd -i` per connection); no host key is baked in (each session makes its own) and
    nothing listens on any TCP port."""
    spec = session_spec(node_runtime, base_image, gpu=False)
    await node_runtime.ensure_running(spec)
    code, out, err = await _run(node_runtime, spec.session_id, (
        "for f in /usr/sbin/sshd /usr/lib/openssh/sftp-server /usr/bin/rsync; do "
        "test -x $f && echo $f; done; echo keys $(ls /etc/ssh | grep -c ssh_host_); "
        "echo listening $(awk 'NR > 1 && $4 == \"0A\" && $2 !~ /^0B00007F:/' "
        "/proc/net/tcp /proc/net/tcp6 | wc -l)"))
    assert code == 0, err
    assert out.splitlines() == ["/usr/sbin/sshd", "/usr/lib/openssh/sftp-server",
                                "/usr/bin/rsync", "keys 0", "listening 0"]
