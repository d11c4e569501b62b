"""`gpuslice model` as a user types it, against a real manager (local store): an upload of a
used name is its next version, NAME is the latest and NAME:VERSION one version, and a delete
says which versions it removes (a bare name of several versions is refused without --all)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import Manager


def test_model_versions_through_the_cli(manager: Manager, tmp_path: Path) -> None:
    weights = tmp_path / "weights.txt"
    weights.write_text("first\n")
    r = manager.cli("model", "upload", str(weights), "--name", "resnet")
    assert r.returncode == 0, r.stderr
    assert "saved model resnet version 1 (resnet:1)" in r.stdout
    weights.write_text("second\n")
    r = manager.cli("model", "upload", str(weights), "--name", "resnet", "--json")
    assert r.returncode == 0, r.stderr
    assert (json.loads(r.stdout)["ref"], json.loads(r.stdout)["latest"]) == ("resnet:2", True)

    r = manager.cli("model", "list", "--json")
    assert [(m["ref"], m["latest"]) for m in json.loads(r.stdout)] == [
        ("resnet:1", False), ("resnet:2", True)]
    r = manager.cli("model", "list")
    assert r.returncode == 0 and "version" in r.stdout and "latest" in r.stdout, r.stdout

    assert manager.cli("model", "download", "resnet", "--to", str(tmp_path / "new")
                       ).returncode == 0
    assert (tmp_path / "new" / "weights.txt").read_text() == "second\n"
    r = manager.cli("model", "download", "resnet:1", "--to", str(tmp_path / "old"), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["model"] == "resnet:1", r.stderr
    assert (tmp_path / "old" / "weights.txt").read_text() == "first\n"
    r = manager.cli("model", "show", "resnet:3")
    assert r.returncode != 0 and "model resnet has no version 3; its versions: 1, 2" in r.stderr

    r = manager.cli("model", "delete", "resnet", "--yes")
    assert r.returncode == 2 and "model resnet has 2 versions (1, 2)" in r.stderr, r.stderr
    assert "gpuslice model delete resnet:VERSION" in r.stderr and "--all" in r.stderr
    r = manager.cli("model", "delete", "resnet:1", "--yes")
    assert r.returncode == 0 and "deleted model resnet version(s) 1" in r.stdout, r.stderr
    r = manager.cli("model", "delete", "resnet", "--all", "--yes", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == {"name": "resnet", "versions": [2]}
    assert json.loads(manager.cli("model", "list", "--json").stdout) == []
