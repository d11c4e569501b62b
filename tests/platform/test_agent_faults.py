"""`gpuslice agent serve` with the faults a node meets: its credential damaged, a second agent
on its data directory, the manager away at start, a session's image missing; each said in one
line, and the agent carries on by itself once the cause is gone."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.waits import scaled

from .conftest import GPUSLICE, Platform, Process, run_split

pytestmark = pytest.mark.docker

SMALL = ["--cpu", "0.25", "--mem", "256m"]
ABSENT = "i17test/absent:1"  # on the allow list, on no node
# How long the agent waits for a missing image: long enough for the test to see it wait
IMAGE_WAIT_S = round(scaled(8))


@pytest.fixture
def split(base_image: str, tmp_path: Path) -> Iterator[Platform]:
    yield from run_split(
        tmp_path, {"GPUSLICE_SESSIONS__ALLOWED_IMAGES": json.dumps([ABSENT])},
        {"GPUSLICE_AGENT_IMAGE_WAIT_S": str(IMAGE_WAIT_S)},
    )


def agent_env(plat: Platform, **changes: str | None) -> dict[str, str]:
    env = json.loads(plat.env["AGENT_ENV_JSON"])
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in output, output
    [line] = [line for line in output.splitlines() if line.startswith("error: ")]
    return line.removeprefix("error: ")


def test_a_damaged_credential_without_a_join_token_is_one_line_then_a_new_token_heals(
    split: Platform,
) -> None:
    plat = split
    plat.ok("session", "create", "--name", "box", *SMALL, "--wait")
    before = plat.wait_status("box", {"RUNNING"})
    plat.processes.pop().stop()
    credential = Path(agent_env(plat)["GPUSLICE_AGENT_DATA_DIR"]) / "credential.json"
    credential.write_text("{not json")
    done = subprocess.run([GPUSLICE, "agent", "serve"], capture_output=True, text=True,
                          env=agent_env(plat, GPUSLICE_AGENT_JOIN_TOKEN=None), timeout=scaled(60))
    assert one_error_line(done) == (
        f"its credential file {credential} is damaged: give it a re-key token "
        "(GPUSLICE_AGENT_JOIN_TOKEN; an admin makes one: `gpuslice node rekey NODE`)")
    # the node is registered: a plain join token cannot take its name (issue 16), a re-key can
    token = json.loads(plat.ok("node", "rekey", plat.node, "--json"))
    agent = Process([GPUSLICE, "agent", "serve"],
                    agent_env(plat, GPUSLICE_AGENT_JOIN_TOKEN=token["token"]))
    plat.processes.append(agent)
    agent.wait_for(f"agent {plat.node}: joined")
    assert "is damaged; registering again with the join token" in agent.output
    after = plat.wait_status("box", {"RUNNING"})
    assert (after["placement"], after["history"]) == (before["placement"], before["history"])


def test_a_second_agent_on_one_data_directory_is_refused(split: Platform) -> None:
    first = split.processes[-1]
    done = subprocess.run([GPUSLICE, "agent", "serve"], capture_output=True, text=True,
                          env=agent_env(split), timeout=scaled(60))
    data = agent_env(split)["GPUSLICE_AGENT_DATA_DIR"]
    assert one_error_line(done) == (
        f"a gpuslice agent is already running on {data} (pid {first.popen.pid}): stop it first "
        f"(Ctrl-C where it runs, or `kill {first.popen.pid}`)")
    assert first.popen.poll() is None


def test_an_agent_started_while_the_manager_is_away_joins_when_it_is_back(
    split: Platform,
) -> None:
    plat = split
    plat.processes.pop().stop()
    manager = plat.processes.pop()
    manager.stop()
    agent = Process([GPUSLICE, "agent", "serve"], agent_env(plat))
    plat.processes.append(agent)
    agent.wait_for(f"agent: manager not reachable yet (manager {plat.url} unreachable", 30)
    again = Process(manager.argv, manager.env)
    plat.processes.insert(0, again)
    agent.wait_for(f"agent {plat.node}: joined", timeout=60)
    plat.ok("session", "create", "--name", "after", *SMALL, "--wait")
    assert "Traceback" not in agent.output


def test_a_session_waits_for_its_missing_image_then_fails_saying_why(split: Platform) -> None:
    plat = split
    waiting = subprocess.Popen(
        [GPUSLICE, "session", "create", "--name", "hopeful", "--image", ABSENT, *SMALL,
         "--wait"], env=plat.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    session = plat.wait_reason("hopeful", "waiting for image")
    assert session["status"] == "PREPARING"
    assert session["status_reason"] == (
        f"waiting for image {ABSENT}, which is not on node {plat.node} (deleted? it starts "
        "once the image is back)")
    # --wait ends with the session's end, saying why, and fails: a script stops there
    # (Ctrl-C on a --wait that waits is test_docker_faults's: there the wait has no timer)
    out, err = waiting.communicate(timeout=scaled(60))
    failed = plat.wait_status("hopeful", {"ERROR"})
    assert waiting.returncode == 1, out + err
    assert err == (f"error: session hopeful ({failed['id'][:12]}) ended ERROR: "
                   f"{failed['status_reason']}\n")
    assert failed["status_reason"] == (
        f"image {ABSENT} is not on node {plat.node} (waited {IMAGE_WAIT_S} s for it): build "
        "or pull it there, then create the session again")
