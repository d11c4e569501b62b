"""Image build helpers that need no Docker: apt mirror discovery, pip index, build context."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gpuslice.imagebuild import ImageBuildError, RootfsRecipe, find_debian_mirror, host_pip_index
from gpuslice.imagebuild.base import _base_context, _pack


def apt_dir(tmp_path: Path, sources_list: str = "", **sources: str) -> Path:
    root = tmp_path / "apt"
    (root / "sources.list.d").mkdir(parents=True)
    (root / "sources.list").write_text(sources_list)
    for name, text in sources.items():
        (root / "sources.list.d" / name.replace("_", ".")).write_text(text)
    return root


def test_mirror_from_deb822_sources_skips_security_and_updates(tmp_path: Path) -> None:
    root = apt_dir(
        tmp_path,
        debian_sources=(
            "Types: deb\nURIs: http://mirror.internal/debian-security\n"
            "Suites: bookworm-security\nComponents: main\n\n"
            "Types: deb deb-src\n# a comment\nURIs: http://mirror.internal/debian/\n"
            "Suites: bookworm bookworm-updates\nComponents: main\n"
        ),
    )
    assert find_debian_mirror("bookworm", root) == "http://mirror.internal/debian"


def test_mirror_from_one_line_sources(tmp_path: Path) -> None:
    root = apt_dir(
        tmp_path,
        "# deb http://old/ bookworm main\n"
        "deb [signed-by=/usr/share/keyrings/k.gpg] https://local.mirror/debian bookworm main\n",
    )
    assert find_debian_mirror("bookworm", root) == "https://local.mirror/debian"


def test_no_mirror_is_a_clear_error(tmp_path: Path) -> None:
    root = apt_dir(tmp_path, "deb http://x/debian bullseye main\n")
    with pytest.raises(ImageBuildError, match="no apt source for Debian bookworm"):
        find_debian_mirror("bookworm", root)


def test_host_pip_index_keeps_network_indexes_only(tmp_path: Path) -> None:
    config = tmp_path / "pip.conf"
    config.write_text(
        "[global]\nindex-url = https://pypi.mirror.internal/simple\n"
        "extra-index-url = file:///opt/local/simple https://extra.internal/simple\n"
        "trusted-host = pypi.mirror.internal\n"
    )
    env_python = tmp_path / "python"
    env_python.write_text(f'#!/bin/sh\nPIP_CONFIG_FILE={config} exec {sys.executable} "$@"\n')
    env_python.chmod(0o755)
    if subprocess.run([str(env_python), "-m", "pip", "--version"], capture_output=True).returncode:
        pytest.skip("pip is not available to this interpreter")
    index = host_pip_index(str(env_python))
    assert index.index_url == "https://pypi.mirror.internal/simple"
    assert index.extra_index_url == "https://extra.internal/simple"
    assert index.trusted_host == "pypi.mirror.internal"


def test_build_context_holds_recipe_hook_and_ca(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    context = _base_context(ca)
    assert set(context) == {
        "Dockerfile",
        "sudo",
        "gpuslice_usersite.py",
        "gpuslice-usersite.pth",
        "hook/gpuslice_hook.py",
        "hook/sitecustomize.py",
        "hook/gpuslice-hook.pth",
        "extra-ca.crt",
    }
    assert context["extra-ca.crt"].startswith(b"-----BEGIN")
    assert b"FROM ${BASE_IMAGE}" in context["Dockerfile"]
    assert _base_context(None)["extra-ca.crt"] == b""
    with tarfile.open(fileobj=io.BytesIO(_pack(context))) as tar:
        assert sorted(tar.getnames()) == sorted(context)
    with pytest.raises(ImageBuildError, match="does not exist"):
        _base_context(tmp_path / "missing.pem")


def test_rootfs_recipe_digest_changes_with_packages() -> None:
    assert RootfsRecipe().digest == RootfsRecipe().digest
    assert RootfsRecipe().digest != RootfsRecipe(packages=("python3",)).digest


def test_extra_ca_bundle_defaults_to_what_the_host_trusts(monkeypatch, tmp_path):
    from gpuslice.imagebuild.base import default_extra_ca_bundle

    bundle = tmp_path / "proxy.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.delenv("GPUSLICE_EXTRA_CA_BUNDLE", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    assert default_extra_ca_bundle() == bundle
    monkeypatch.setenv("GPUSLICE_EXTRA_CA_BUNDLE", "")
    assert default_extra_ca_bundle() is None  # explicitly none
    monkeypatch.delenv("GPUSLICE_EXTRA_CA_BUNDLE")
    monkeypatch.delenv("SSL_CERT_FILE")
    monkeypatch.setattr("gpuslice.imagebuild.base.HOST_CA_BUNDLE", str(bundle))
    assert default_extra_ca_bundle() == bundle  # the host's system bundle
