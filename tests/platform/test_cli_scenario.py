"""The users' scenario driven through the CLI (subprocesses) against a real `gpuslice up`."""

from __future__ import annotations

import json

import pytest

from .conftest import Platform, restart_up

pytestmark = pytest.mark.docker

SMALL = ["--cpu", "0.25", "--mem", "256m"]
NO_SUCH = "no session 'no-such-session': give its id, or the name of one of your sessions"


@pytest.fixture
def platform(shared_platform: Platform) -> Platform:
    """One `gpuslice up` for the whole module; each test ends its sessions (the restart test
    restarts it in place, and it runs on as `up` does after any restart)."""
    return shared_platform


def test_two_fgpu_three_sessions_then_destroy_one(platform: Platform) -> None:
    """2 fGPU of capacity, 3 sessions of 1 fGPU: 2 RUNNING, 1 PENDING with its reason."""
    created = json.loads(platform.ok(
        "session", "create", "--gpu", "1", *SMALL, "--count", "3", "--name", "demo", "--wait",
        "--json",
    ))
    assert [s["name"] for s in created] == ["demo-1", "demo-2", "demo-3"]
    listed = {s["name"]: s for s in json.loads(platform.ok("session", "list", "--json"))["items"]}
    assert {n: s["status"] for n, s in listed.items()} == {
        "demo-1": "RUNNING", "demo-2": "RUNNING", "demo-3": "PENDING",
    }
    waiting = listed["demo-3"]
    assert waiting["queue_position"] == 1
    assert waiting["status_reason"] == "needs 1.0 fGPU on one GPU; no GPU has a free slice"
    table = platform.ok("session", "list")
    assert "no GPU has a free slice" in table and "demo-3" in table

    nodes = platform.ok("node", "list")
    assert "2/2" in nodes and "demo-1 1" in nodes  # both fGPU of the GPU in use, by whom

    assert "demo-1: TERMINATING" in platform.ok("session", "destroy", "demo-1")
    platform.wait_status("demo-3", {"RUNNING"}, timeout=10)  # how soon: bench/start_latency
    platform.wait_status("demo-1", {"TERMINATED"}, timeout=30)


def test_batch_session_result_logs_and_exec(platform: Platform) -> None:
    platform.ok("session", "create", "--type", "batch", "--name", "job", *SMALL, "--gpu", "0.5",
                "--command", "sh -c 'echo hello from the job; exit 3'")
    job = platform.wait_status("job", {"TERMINATED", "ERROR"})
    assert (job["status"], job["result"], job["exit_code"]) == ("TERMINATED", "FAILED", 3)
    assert "hello from the job" in platform.ok("session", "logs", "job")

    platform.ok("session", "create", "--name", "box", *SMALL, "--gpu", "0.5", "--wait")
    out = platform.ok("session", "exec", "box", "--", "cat", "/etc/gpuslice/allocation.json")
    allocation = json.loads(out)
    assert allocation["devices"][0]["memory_bytes"] == 2 * 1024**3  # 0.5 of 2 fGPU of 8 GiB
    assert platform.ok("session", "exec", "box", "--", "id", "-u").strip() == "1000"
    failed = platform.cli("session", "exec", "box", "--", "sh", "-c", "exit 7")
    assert failed.returncode == 7


BAD_INPUT = [
    (["session", "create", "--gpu", "-1"], "--gpu: fGPU must be zero or more"),
    (["session", "create", "--gpu", "abc"], "--gpu: 'abc' is not a number"),
    (["session", "create", "--gpu", "0.333"], "more than 2 decimal places"),
    (["session", "create", "--mem", "5q"], "--mem: '5q' is not a size; write e.g. 512m"),
    (["session", "create", "--count", "0"], "--count: must be 1 or more, got 0"),
    (["session", "create", "--image", "nope:1"], "unknown image 'nope:1'"),
    (["session", "create", "--gpu", "2.5"], "not a whole number of GPUs"),
    (["session", "create", "--gpu", "4", "--cpu", "64"], "could ever hold"),
    (["session", "show", "no-such-session"], NO_SUCH),
    (["session", "logs", "no-such-session"], NO_SUCH),
    (["session", "destroy", "no-such-session"], NO_SUCH),
    (["session", "exec", "no-such-session", "--", "ls"], NO_SUCH),
    (["session", "list", "--status", "SLEEPING"], "is not a status"),
    (["admin", "policy", "set", "nobody", "--max-gpu", "2"], "no user named 'nobody'"),
    (["admin", "policy", "set", "admin", "--max-gpu", "x"], "--max-gpu: 'x' is not a number"),
]


def test_bad_input_is_one_clear_line_and_a_nonzero_exit(platform: Platform) -> None:
    for args, message in BAD_INPUT:
        done = platform.cli(*args)
        assert done.returncode != 0, args
        assert "Traceback" not in done.stderr + done.stdout, args
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, done.stderr)


def test_wrong_password_and_a_users_own_view(platform: Platform) -> None:
    wrong = platform.cli("login", platform.url, "--username", "admin", "--password-stdin",
                         stdin="not-the-password\n")
    assert wrong.returncode != 0 and "wrong username or password" in wrong.stderr
    created = json.loads(platform.ok("admin", "user", "create", "bob", "--json"))
    platform.ok("admin", "policy", "set", "bob", "--max-gpu", "0.5", "--max-sessions", "1")
    platform.ok("session", "create", "--name", "admins", *SMALL)

    bob = platform.env | {"GPUSLICE_CLIENT_CONFIG": str(platform.data_dir / "bob.json")}
    as_bob = Platform(platform.url, platform.data_dir, platform.node, bob)
    login = as_bob.cli("login", platform.url, "--username", "bob", "--password-stdin",
                       stdin=created["password"] + "\n")
    assert login.returncode == 0, login.stderr
    assert json.loads(as_bob.ok("session", "list", "--json"))["items"] == []
    # bob's names are his own: the admin's session named so is not even said to exist
    assert "no session 'admins': give its id, or the name of one of your sessions" in \
        as_bob.cli("session", "show", "admins").stderr
    too_much = as_bob.cli("session", "create", "--gpu", "1", *SMALL)
    assert too_much.returncode != 0 and "quota allows at most 0.5 fGPU" in too_much.stderr


def test_sessions_survive_a_restart_of_up_and_are_readopted(platform: Platform) -> None:
    platform.ok("session", "create", "--name", "long", "--gpu", "1", *SMALL, "--wait")
    before = platform.wait_status("long", {"RUNNING"})
    restart_up(platform)  # Ctrl-C, then `gpuslice up` again on the same data directory
    platform.wait_next_heartbeat()  # the readopting agent's reconcile pass, reported
    after = platform.wait_status("long", {"RUNNING"})
    assert after["placement"] == before["placement"]
    assert len(after["history"]) == len(before["history"])  # never left RUNNING
    assert "hello" in platform.ok("session", "exec", "long", "--", "echo", "hello")
