"""Storage folders into sessions: the agent's own checks, and real mounts in real containers."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuslice.agent.runtime import ContainerSpec, DockerRuntime
from gpuslice.agent.runtime.folders import folder_mounts
from gpuslice.agent.runtime.spec import Mount, SpecError
from gpuslice.common.schemas.agents import FolderMount

MakeSpec = Callable[..., ContainerSpec]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    top = tmp_path / "storage"
    for folder in ("users/u1/f1", "users/u1/f2", "shared/s1"):
        (top / folder).mkdir(parents=True)
    return top


def test_folders_mount_under_home_work(root: Path) -> None:
    mounts = folder_mounts(root, [
        FolderMount(path="users/u1/f1", name="data", read_only=False),
        FolderMount(path="shared/s1", name="imagenet", read_only=True),
        FolderMount(path="users/u1/f2", name=".local", read_only=False),
    ])
    assert mounts == (
        Mount(str(root / "users/u1/f1"), "/home/work/data", read_only=False),
        Mount(str(root / "shared/s1"), "/home/work/imagenet", read_only=True),
        Mount(str(root / "users/u1/f2"), "/home/work/.local", read_only=False),
    )
    assert folder_mounts(None, []) == ()


@pytest.mark.parametrize(("path", "name", "why"), [
    ("users/../../etc", "data", "would leave the storage root"),
    ("/etc", "data", "would leave the storage root"),
    ("users//u1", "data", "would leave the storage root"),
    ("users/u1/./f1", "data", "would leave the storage root"),
    ("users/u1/nope", "data", "is not under the storage root"),
    ("users/u1/f1", "../x", "is not one path component"),
    ("users/u1/f1", "a/b", "is not one path component"),
    ("users/u1/f1", "..", "is not one path component"),
])
def test_mounts_that_would_leave_the_root_are_refused(
    root: Path, path: str, name: str, why: str
) -> None:
    with pytest.raises(SpecError, match=why):
        folder_mounts(root, [FolderMount(path=path, name=name, read_only=False)])


def test_a_link_anywhere_on_the_path_is_refused(root: Path, tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (root / "users" / "u2").symlink_to(tmp_path / "outside")
    (root / "users" / "u1" / "f3").symlink_to(tmp_path / "outside")
    for path in ("users/u2", "users/u1/f3"):
        with pytest.raises(SpecError, match="symbolic link"):
            folder_mounts(root, [FolderMount(path=path, name="x", read_only=False)])


def test_a_node_without_storage_says_so(root: Path) -> None:
    with pytest.raises(SpecError, match="GPUSLICE_AGENT_STORAGE_ROOT"):
        folder_mounts(None, [FolderMount(path="users/u1/f1", name="data", read_only=False)])


@pytest.mark.docker
async def test_read_only_and_read_write_folders_in_a_container(
    runtime: DockerRuntime, make_spec: MakeSpec, root: Path
) -> None:
    for folder in (root / "users/u1/f1", root / "shared/s1"):
        os.chown(folder, 1000, 1000)
        folder.chmod(0o770)
    (root / "shared/s1/labels.txt").write_text("cat\n")
    mounts = folder_mounts(root, [
        FolderMount(path="users/u1/f1", name="data", read_only=False),
        FolderMount(path="shared/s1", name="imagenet", read_only=True),
    ])
    spec = make_spec(folders=mounts)
    await runtime.ensure_running(spec)
    wrote = await runtime.exec(spec.session_id, ["sh", "-c", "echo hi > /home/work/data/out.txt"])
    assert wrote.exit_code == 0, wrote.stderr
    assert (root / "users/u1/f1/out.txt").read_text() == "hi\n"
    st = (root / "users/u1/f1/out.txt").stat()
    assert (st.st_uid, st.st_gid) == (1000, 1000)  # the session user: the API can manage it
    read = await runtime.exec(spec.session_id, ["cat", "/home/work/imagenet/labels.txt"])
    assert read.stdout == "cat\n"
    refused = await runtime.exec(spec.session_id,
                                 ["sh", "-c", "echo x > /home/work/imagenet/new.txt"])
    assert refused.exit_code != 0 and "Read-only file system" in refused.stderr
