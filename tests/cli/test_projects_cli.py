"""`gpuslice admin project …` and `gpuslice node groups` (issue 32): an admin makes a project,
adds a member and sets its quotas from the CLI, every listing has --json; errors are one line."""

from __future__ import annotations

import json

from .conftest import IMAGE, Manager


def test_an_admin_manages_a_project_from_the_cli(manager: Manager) -> None:
    assert manager.cli("admin", "user", "create", "alice", "--password",
                       "password-alice").returncode == 0
    made = manager.cli("admin", "project", "create", "vision", "--gpu", "8", "--sessions", "4",
                       "--group", "a100", "--group", "t4", "--gpu-model", "a100=4", "--json")
    assert made.returncode == 0, made.stderr
    body = json.loads(made.stdout)
    assert (body["max_gpu"], body["max_sessions"], body["groups"]) == (8, 4, ["a100", "t4"])
    assert body["max_gpu_models"] == {"a100": 4}
    added = manager.cli("admin", "project", "add", "vision", "alice", "--json")
    assert json.loads(added.stdout)["members"] == ["alice"], added.stderr
    listed = manager.cli("admin", "project", "list")
    assert "vision" in listed.stdout and "0 of 8" in listed.stdout, listed.stdout
    shown = manager.cli("admin", "project", "show", "vision")
    assert "groups: [\"a100\", \"t4\"]" in shown.stdout, shown.stdout
    changed = manager.cli("admin", "project", "set", "vision", "--gpu", "2", "--json")
    assert (json.loads(changed.stdout)["max_gpu"], json.loads(changed.stdout)["groups"]) == (
        2, None)
    removed = manager.cli("admin", "project", "remove", "vision", "alice", "--json")
    assert json.loads(removed.stdout)["members"] == []
    groups = json.loads(manager.cli("node", "groups", "--json").stdout)
    assert [g["name"] for g in groups] in ([], ["default"])
    usage = manager.cli("usage", "--by", "project", "--csv")
    assert usage.returncode == 0 and usage.stdout.startswith("project,day,"), usage.stderr


def test_bad_project_input_is_one_line(manager: Manager) -> None:
    for args, needle in (
        (("admin", "project", "create", "Bad Name"), "lowercase letters"),
        (("admin", "project", "create", "ok", "--gpu", "lots"), "'lots' is not a number"),
        (("admin", "project", "create", "ok", "--gpu-model", "a100"), "MODEL=N"),
        (("admin", "project", "add", "nope", "alice"), "no project nope"),
        (("node", "set-group", "nope", "a100"), "no node nope"),
        (("usage", "--by", "team"), "--by: 'team': use user or project"),
    ):
        bad = manager.cli(*args)
        assert bad.returncode != 0 and "Traceback" not in bad.stderr, bad.stderr
        assert bad.stderr.startswith("error: ") and len(bad.stderr.strip().splitlines()) == 1, \
            bad.stderr
        assert needle in bad.stderr, bad.stderr


def test_an_admin_sets_a_projects_time_limits_from_the_cli(manager: Manager) -> None:
    made = manager.cli("admin", "project", "create", "vision", "--default-time", "2h",
                       "--max-time", "1d", "--json")
    assert made.returncode == 0, made.stderr
    body = json.loads(made.stdout)
    assert (body["default_time_limit"], body["max_time_limit"]) == (7200, 86400)
    shown = manager.cli("admin", "project", "show", "vision")
    assert "default_time_limit: 2h" in shown.stdout and "max_time_limit: 1d" in shown.stdout, \
        shown.stdout
    run = manager.cli("session", "create", "--image", IMAGE, "--project", "vision", "--json")
    assert json.loads(run.stdout)[0]["time_limit"] == 7200, run.stderr
    changed = manager.cli("admin", "project", "set", "vision", "--max-time", "1:30:00", "--json")
    assert json.loads(changed.stdout)["max_time_limit"] == 5400, changed.stderr
    assert json.loads(changed.stdout)["default_time_limit"] is None  # set replaces them all
    for args, needle in (
        (("session", "create", "--image", IMAGE, "--project", "vision", "--time", "2h"),
         "at most 1h30m (the maximum of project vision)"),
        (("admin", "project", "set", "vision", "--default-time", "2h", "--max-time", "1h"),
         "2h is longer than the maximum 1h"),
        (("admin", "project", "set", "vision", "--max-time", "soon"),
         "'soon' is not a time limit"),
    ):
        bad = manager.cli(*args)
        assert bad.returncode != 0 and "Traceback" not in bad.stderr, bad.stderr
        assert bad.stderr.startswith("error: ") and len(bad.stderr.strip().splitlines()) == 1, \
            bad.stderr
        assert needle in bad.stderr, bad.stderr


def test_an_admin_renames_and_deletes_a_project_from_the_cli(manager: Manager) -> None:
    assert manager.cli("admin", "user", "create", "alice", "--password",
                       "password-alice").returncode == 0
    assert manager.cli("admin", "project", "create", "vision").returncode == 0
    assert manager.cli("admin", "project", "add", "vision", "alice").returncode == 0
    renamed = manager.cli("admin", "project", "rename", "vision", "cv")
    assert renamed.returncode == 0 and renamed.stdout.strip() == "renamed project vision to cv", \
        renamed.stderr
    shown = json.loads(manager.cli("admin", "project", "show", "cv", "--json").stdout)
    assert (shown["name"], shown["members"]) == ("cv", ["alice"])
    held = manager.cli("folder", "create", "images", "--project", "cv")
    assert held.returncode == 0, held.stderr
    for args, needle in (
        (("admin", "project", "delete", "cv"), "project cv still has 1 folder(s)"),
        (("admin", "project", "rename", "~alice", "mine"),
         "~alice is a personal project: it follows its user and cannot be renamed"),
        (("admin", "project", "delete", "vision"), "no project vision"),
    ):
        bad = manager.cli(*args)
        assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert needle in bad.stderr, bad.stderr
    assert manager.cli("admin", "project", "create", "spare").returncode == 0
    gone = manager.cli("admin", "project", "delete", "spare", "--json")
    assert gone.returncode == 0 and json.loads(gone.stdout) == {"deleted": "spare"}, gone.stderr
    names = [p["name"] for p in json.loads(manager.cli("admin", "project", "list",
                                                        "--json").stdout)]
    assert "spare" not in names and "cv" in names
