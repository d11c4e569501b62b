"""`gpuslice admin priority-class …` and `--priority CLASS` (issue 32): an admin manages the
priority classes from the CLI, a user launches in one; errors are one line."""

from __future__ import annotations

import json

from .conftest import IMAGE, Manager


def test_an_admin_manages_classes_and_a_session_names_one(manager: Manager) -> None:
    made = manager.cli("admin", "priority-class", "create", "high", "--rank", "10",
                       "--min-runtime", "60", "--grace", "20")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == ("created priority class high: rank 10, minimum runtime 60s, "
                                   "grace 20s, interactive sessions kept, used by admins only")
    made = manager.cli("admin", "priority-class", "set", "high", "--preempt-interactive",
                       "--json")
    assert made.returncode == 0 and json.loads(made.stdout)["preempt_interactive"], made.stderr
    listed = json.loads(manager.cli("admin", "priority-class", "list", "--json").stdout)
    assert [(c["name"], c["rank"], c["default"]) for c in listed] == [
        ("high", 10, False), ("normal", 0, True)]
    table = manager.cli("admin", "priority-class", "list").stdout
    assert "high" in table and "preemptible" in table and "yes" in table
    run = manager.cli("session", "create", "--image", IMAGE, "--priority", "high", "--json")
    assert run.returncode == 0, run.stderr
    [session] = json.loads(run.stdout)
    assert (session["priority_class"], session["priority"]) == ("high", 0)
    # a number is still the priority within the class (the default one here)
    run = manager.cli("session", "create", "--image", IMAGE, "--priority", "3", "--json")
    [session] = json.loads(run.stdout)
    assert (session["priority_class"], session["priority"]) == ("normal", 3)


def test_bad_classes_are_one_line(manager: Manager) -> None:
    bad = manager.cli("session", "create", "--image", IMAGE, "--priority", "urgent")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "no priority class 'urgent'; the classes you may use: normal" in bad.stderr
    bad = manager.cli("admin", "priority-class", "create", "x", "--rank", "5000")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "rank" in bad.stderr.lower()
    missing = manager.cli("admin", "priority-class", "delete", "nope")
    assert missing.returncode != 0 and "no priority class 'nope'" in missing.stderr


def test_an_admin_limits_a_class_to_projects(manager: Manager) -> None:
    for name in ("vision", "nlp"):
        assert manager.cli("admin", "project", "create", name).returncode == 0
    made = manager.cli("admin", "priority-class", "create", "high", "--rank", "10",
                       "--project", "vision", "--project", "nlp")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip().endswith("sessions kept, used by projects nlp, vision")
    table = manager.cli("admin", "priority-class", "list").stdout
    line = next(x for x in table.splitlines() if x.strip().startswith("high"))
    assert "nlp, vision" in line, table
    assert "everyone" in next(x for x in table.splitlines() if x.strip().startswith("normal"))
    bad = manager.cli("session", "create", "--image", IMAGE, "--priority", "high")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert ("project ~admin may not use priority class high; the classes it may use: normal"
            in bad.stderr), bad.stderr
    ok = manager.cli("session", "create", "--image", IMAGE, "--priority", "high",
                     "--project", "vision", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)[0]["priority_class"] == "high", ok.stderr
    changed = manager.cli("admin", "priority-class", "set", "high", "--project", "nlp", "--json")
    assert json.loads(changed.stdout)["projects"] == ["nlp"], changed.stderr
    changed = manager.cli("admin", "priority-class", "set", "high", "--any-project", "--json")
    assert json.loads(changed.stdout)["any_project"] is True, changed.stderr
    assert json.loads(changed.stdout)["projects"] == []
    changed = manager.cli("admin", "priority-class", "set", "high", "--admins-only")
    assert changed.stdout.strip().endswith("used by admins only"), changed.stderr
    both = manager.cli("admin", "priority-class", "set", "high", "--any-project",
                       "--project", "nlp")
    assert both.returncode == 2 and "give one of them" in both.stderr, both.stderr
