"""The request channel on the agent's side: one dispatch by kind, one answer per request.

The manager is stood in for at the HTTP edge (``httpx.MockTransport``), so ``ManagerLink`` is
the real one. Dispatch and failure answers use a stand-in runtime (a failure on demand);
logs, exec and commit also run against the real Docker Engine.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import typing
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiodocker
import httpx
import pytest
from pydantic import TypeAdapter

from gpuslice.agent.manager_link import Credential, ManagerLink
from gpuslice.agent.requests import KINDS, OUTPUT_CAP, RequestContext, RequestRunner
from gpuslice.agent.runtime import ContainerSpec, DockerRuntime, ExecResult, SessionNotFound
from gpuslice.agent.runtime.models import ImageInfo
from gpuslice.agent.streams import ssh
from gpuslice.common.images import LABEL_TITLE, ImageMeta
from gpuslice.common.schemas.agents import (
    AgentRequest,
    Answer,
    Ask,
    CommitAsk,
    ExecAsk,
    LogsAsk,
    SignalAsk,
)
from gpuslice.common.schemas.streams import OpenSsh
from tests.platform import app_image
from tests.waits import scaled

MANAGER = "http://manager.test"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFhB1tI3sHfpjbFW6rJ0nOq0b9G5hBr8v0d0sZrbH1Gd alice"
SECRET_ARGV = "argv-only-the-owner-sees"
ANSWERS = TypeAdapter(Answer)


class FakeManager:
    """The manager's request endpoint: records each answer by request id."""

    def __init__(self, status: int = 204) -> None:
        self.status = status
        self.answers: dict[str, Answer] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.method == "PUT"
        assert request.headers["Authorization"] == "Bearer gsn_node"
        prefix = "/api/v1/agents/me/requests/"
        assert request.url.path.startswith(prefix)
        self.answers[request.url.path.removeprefix(prefix)] = ANSWERS.validate_json(
            request.content
        )
        return httpx.Response(self.status)


class StandInRuntime:
    """Only the calls requests make; each answers what the test set, or raises it."""

    def __init__(self, result: object) -> None:
        self.result = result
        self.calls: list[tuple[str, object]] = []

    async def _answer(self, name: str, argument: object) -> object:
        self.calls.append((name, argument))
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result

    async def logs(self, session_id: str, *, tail: int | None = None) -> object:
        return await self._answer("logs", tail)

    async def exec(self, session_id: str, cmd: list[str], *, timeout: float) -> object:
        return await self._answer("exec", timeout)

    async def commit(self, session_id: str, reference: str, labels: dict[str, str]) -> object:
        return await self._answer("commit", reference)

    async def session_image_labels(self, session_id: str) -> dict[str, str]:
        return {}  # an image without apps: nothing to check before a commit


@pytest.fixture
async def manager() -> FakeManager:
    return FakeManager()


@pytest.fixture
async def link(manager: FakeManager, tmp_path: Path) -> AsyncIterator[ManagerLink]:
    link = ManagerLink(MANAGER, tmp_path, transport=httpx.MockTransport(manager))
    link.credential = Credential(MANAGER, "node-1", "gsn_node", 5000)
    yield link
    await link.close()


class Told:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.images_changed = 0

    def say(self, line: str) -> None:
        self.lines.append(line)

    def changed(self) -> None:
        self.images_changed += 1


def runner_for(runtime: object, link: ManagerLink, told: Told | None = None) -> RequestRunner:
    told = told or Told()
    return RequestRunner(RequestContext(
        runtime=runtime,  # type: ignore[arg-type]
        link=link, say=told.say, images_changed=told.changed,
    ))


def request(
    ask: LogsAsk | ExecAsk | CommitAsk | SignalAsk, session_id: str | None = "s-1"
) -> AgentRequest:
    return AgentRequest(id=f"r{uuid.uuid4().hex[:8]}", session_id=session_id, ask=ask)


async def answer_of(runner: RequestRunner, manager: FakeManager, req: AgentRequest) -> Answer:
    await runner.serve(req)
    return manager.answers[req.id]


# ---------------------------------------------------------------- dispatch (no Docker)


def test_every_kind_on_the_wire_has_exactly_one_handler() -> None:
    union = typing.get_args(Ask)[0]
    kinds = {model.model_fields["kind"].default for model in typing.get_args(union)}
    assert kinds == set(KINDS)


@pytest.mark.parametrize(
    ("ask", "result", "expected"),
    [
        (LogsAsk(tail=10), "a\nb\n", {"kind": "logs", "logs": "a\nb\n", "truncated": False}),
        (ExecAsk(command=["true"], timeout_ms=1500), ExecResult(3, "out", "err"),
         {"kind": "exec", "exit_code": 3, "stdout": "out", "stderr": "err", "error": ""}),
        (CommitAsk(reference="me/saved:1", labels={"a": "b"}),
         ImageInfo("me/saved:1", "sha256:abc", 42, {"a": "b"}),
         {"kind": "commit", "image_id": "sha256:abc", "size": 42, "labels": {"a": "b"},
          "error": ""}),
    ],
)
async def test_each_kind_goes_to_its_handler_and_is_answered_in_kind(
    link: ManagerLink, manager: FakeManager, ask: LogsAsk | ExecAsk | CommitAsk, result: object,
    expected: dict[str, object],
) -> None:
    runtime = StandInRuntime(result)
    answer = await answer_of(runner_for(runtime, link), manager, request(ask))
    assert answer.model_dump() == expected
    assert [name for name, _ in runtime.calls] == [ask.kind]


@pytest.mark.parametrize(
    ("ask", "failure", "expected"),
    [
        (LogsAsk(tail=10), SessionNotFound("s-1"), "(no logs: no container for session s-1)\n"),
        (ExecAsk(command=["x"], timeout_ms=100), SessionNotFound("s-1"),
         "could not run: no container for session s-1"),
        (CommitAsk(reference="me/x:1"), aiodocker.DockerError(409, "in use"),
         "could not commit: in use"),
        (ExecAsk(command=["x"], timeout_ms=100), KeyError(SECRET_ARGV),
         f"could not run: KeyError: '{SECRET_ARGV}'"),
        (CommitAsk(reference="me/x:1"), ValueError("a bug"),
         "could not commit: ValueError: a bug"),
    ],
)
async def test_a_failing_handler_is_still_answered_with_the_reason(
    link: ManagerLink, manager: FakeManager, caplog: pytest.LogCaptureFixture,
    ask: LogsAsk | ExecAsk | CommitAsk, failure: BaseException, expected: str,
) -> None:
    answer = await answer_of(runner_for(StandInRuntime(failure), link), manager, request(ask))
    assert answer.kind == ask.kind
    assert (answer.logs if answer.kind == "logs" else answer.error) == expected
    assert SECRET_ARGV not in caplog.text  # a bug is logged by its type, never its message


async def test_a_request_that_names_no_session_is_answered_as_such(
    link: ManagerLink, manager: FakeManager
) -> None:
    runtime = StandInRuntime("never read")
    answer = await answer_of(runner_for(runtime, link), manager,
                             request(ExecAsk(command=["id"], timeout_ms=100), session_id=None))
    assert answer.error == "could not run: the request names no session"
    assert runtime.calls == []


async def test_exec_timeout_is_given_in_ms_and_said_in_seconds(
    link: ManagerLink, manager: FakeManager
) -> None:
    runtime = StandInRuntime(TimeoutError())
    ask = ExecAsk(command=["sleep", "9"], timeout_ms=1500)
    answer = await answer_of(runner_for(runtime, link), manager, request(ask))
    assert runtime.calls == [("exec", 1.5)]
    assert (answer.exit_code, answer.error) == (-1, "timed out after 1.5s")


async def test_output_is_capped_to_its_newest_4_mib(
    link: ManagerLink, manager: FakeManager
) -> None:
    big = "x" * OUTPUT_CAP + "the end"
    logs = await answer_of(runner_for(StandInRuntime(big), link), manager,
                           request(LogsAsk(tail=100_000)))
    assert len(logs.logs) == OUTPUT_CAP and logs.logs.endswith("the end") and logs.truncated
    ran = await answer_of(runner_for(StandInRuntime(ExecResult(0, big, big)), link), manager,
                          request(ExecAsk(command=["cat"], timeout_ms=100)))
    assert len(ran.stdout) == len(ran.stderr) == OUTPUT_CAP and ran.stdout.endswith("the end")


async def test_a_commit_tells_the_operator_and_the_catalog_at_once(
    link: ManagerLink, manager: FakeManager
) -> None:
    told = Told()
    runtime = StandInRuntime(ImageInfo("me/saved:1", "sha256:abc", 42, {}))
    await answer_of(runner_for(runtime, link, told), manager,
                    request(CommitAsk(reference="me/saved:1")))
    assert told.lines == ["agent: session s-1 committed as me/saved:1"]
    assert told.images_changed == 1


async def test_take_runs_each_request_once_as_its_own_task(
    link: ManagerLink, manager: FakeManager
) -> None:
    runtime = StandInRuntime("log line\n")
    runner = runner_for(runtime, link)
    requests = [request(LogsAsk(tail=1)) for _ in range(3)]
    runner.take(requests)
    async with asyncio.timeout(scaled(5)):
        while len(manager.answers) < 3:
            await asyncio.sleep(0.01)
    assert set(manager.answers) == {r.id for r in requests}
    assert len(runtime.calls) == 3
    await runner.close()


async def test_an_answer_no_longer_awaited_is_dropped_quietly(
    link: ManagerLink, manager: FakeManager, caplog: pytest.LogCaptureFixture
) -> None:
    manager.status = 404
    caplog.set_level(logging.INFO, logger="gpuslice.agent.requests")
    await runner_for(StandInRuntime("x"), link).serve(request(LogsAsk(tail=1)))
    assert "no longer awaited" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_close_cancels_what_still_runs(link: ManagerLink, manager: FakeManager) -> None:
    class Slow(StandInRuntime):
        async def exec(self, session_id: str, cmd: list[str], *, timeout: float) -> object:
            await asyncio.sleep(60)
            raise AssertionError("not cancelled")

    runner = runner_for(Slow(None), link)
    runner.take([request(ExecAsk(command=["sleep", "60"], timeout_ms=60_000))])
    await asyncio.sleep(0)
    async with asyncio.timeout(scaled(5)):
        await runner.close()
    assert manager.answers == {}


# ---------------------------------------------------------------- the real Docker Engine


@pytest.mark.docker
async def test_logs_and_exec_in_a_real_session(
    runtime: DockerRuntime, make_spec: Callable[..., ContainerSpec], link: ManagerLink,
    manager: FakeManager, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    spec = make_spec(command=("sh", "-c", "echo one; echo two; echo three; sleep infinity"))
    await runtime.ensure_running(spec)
    runner = runner_for(runtime, link)
    async with asyncio.timeout(scaled(10)):
        while "three" not in await runtime.logs(spec.session_id):
            await asyncio.sleep(0.05)
    logs = await answer_of(runner, manager, request(LogsAsk(tail=2), spec.session_id))
    assert logs.logs == "two\nthree\n"
    script = f"echo {SECRET_ARGV}; echo oops >&2; exit 3"
    ran = await answer_of(runner, manager,
                          request(ExecAsk(command=["sh", "-c", script], timeout_ms=20_000),
                                  spec.session_id))
    assert (ran.exit_code, ran.stdout, ran.stderr, ran.error) == (3, f"{SECRET_ARGV}\n",
                                                                  "oops\n", "")
    assert SECRET_ARGV not in caplog.text


@pytest.mark.docker
async def test_the_time_limit_warning_reaches_the_sessions_command(
    runtime: DockerRuntime, make_spec: Callable[..., ContainerSpec], link: ManagerLink,
    manager: FakeManager,
) -> None:
    """SIGUSR1 to the container's init is handed to the command, which can save its work."""
    script = 'trap "echo warned: saving" USR1; echo ready; while true; do sleep 0.1; done'
    spec = make_spec(command=("sh", "-c", script))
    await runtime.ensure_running(spec)
    runner = runner_for(runtime, link)
    async with asyncio.timeout(scaled(10)):
        while "ready" not in await runtime.logs(spec.session_id):
            await asyncio.sleep(0.05)
    sent = await answer_of(runner, manager, request(SignalAsk(signal="SIGUSR1"), spec.session_id))
    assert sent.model_dump() == {"kind": "signal", "error": ""}
    async with asyncio.timeout(scaled(10)):
        while "warned: saving" not in await runtime.logs(spec.session_id):
            await asyncio.sleep(0.05)
    gone = await answer_of(runner, manager, request(SignalAsk(signal="SIGUSR1"), "no-such"))
    assert gone.model_dump() == {
        "kind": "signal", "error": "not sent: session no-such has no running container"}


@pytest.mark.docker
async def test_commit_of_a_real_session_answers_the_new_image(
    runtime: DockerRuntime, make_spec: Callable[..., ContainerSpec], link: ManagerLink,
    manager: FakeManager,
) -> None:
    spec = make_spec()
    await runtime.ensure_running(spec)
    reference = f"gpuslice-test/commit-{uuid.uuid4().hex[:8]}:1"
    told = Told()
    answer = await answer_of(
        runner_for(runtime, link, told), manager,
        request(CommitAsk(reference=reference, labels={"gpuslice.image.owner": "alice"}),
                spec.session_id),
    )
    try:
        assert answer.error == "" and answer.image_id.startswith("sha256:")
        assert answer.labels["gpuslice.image.owner"] == "alice"
        assert told.images_changed == 1
    finally:
        assert await runtime.remove_image(reference)


@pytest.mark.docker
async def test_a_commit_keeps_only_the_apps_whose_programs_remain(
    runtime: DockerRuntime, make_spec: Callable[..., ContainerSpec], link: ManagerLink,
    manager: FakeManager, base_image: str,
) -> None:
    # Issue 34, finding 3: echo_app.py removed in the session: its apps (echo, and slow, whose
    # `sh -c` line runs it) are not offered by the committed image; broken's program (sh) is
    apps_image = f"gpuslice-test/apps-{uuid.uuid4().hex[:8]}:1"
    await asyncio.to_thread(app_image.build, apps_image, base_image)
    reference = f"gpuslice-test/commit-{uuid.uuid4().hex[:8]}:1"
    try:
        spec = make_spec(image=apps_image)
        await runtime.ensure_running(spec)
        gone = await runtime.exec(spec.session_id, ["rm", app_image.IN_IMAGE], user="root")
        assert gone.exit_code == 0, gone.stderr
        answer = await answer_of(runner_for(runtime, link), manager, request(
            CommitAsk(reference=reference, labels={LABEL_TITLE: "alice's custom image"}),
            spec.session_id))
        assert answer.error == "", answer.error
        meta = ImageMeta.from_labels(answer.labels)
        assert [a.name for a in meta.apps] == ["broken"]
        assert meta.title == "alice's custom image"
        await runtime.remove(spec.session_id)
    finally:
        await runtime.remove_image(reference)
        await asyncio.to_thread(app_image.remove, apps_image)


class _MadeBeforeTheSshTmpfs(ContainerSpec):
    """A session's container as an agent before review F9 made it: SSH's state in its layer."""

    def create_config(self, *args: typing.Any, **kwargs: typing.Any) -> dict[str, typing.Any]:
        config = ContainerSpec.create_config(self, *args, **kwargs)
        del config["HostConfig"]["Tmpfs"]
        return config


@pytest.mark.docker
@pytest.mark.parametrize("made", ["now", "before"])
async def test_a_commit_takes_none_of_the_ssh_setups_files(
    runtime: DockerRuntime, make_spec: Callable[..., ContainerSpec], link: ManagerLink,
    manager: FakeManager, made: str,
) -> None:
    # Review F9: SSH's setup writes the session's env (SetEnv: HF_TOKEN…), the owner's keys and
    # the host key; an image committed from the session (then published) must hold none of it
    spec = make_spec(env={"HF_TOKEN": "hf_secret_f9"})
    if made == "before":
        spec = _MadeBeforeTheSshTmpfs(**{f: getattr(spec, f) for f in ContainerSpec.__slots__})
    await runtime.ensure_running(spec)
    await ssh.prepare(runtime, spec.session_id, OpenSsh(keys=[SSH_KEY]))
    config = await runtime.exec(spec.session_id, ["cat", f"{ssh.SSH_DIR}/sshd_config"])
    assert "HF_TOKEN=hf_secret_f9" in config.stdout  # what the commit must leave behind
    host_key = await runtime.exec(spec.session_id, ["cat", f"{ssh.SSH_DIR}/host_ed25519.pub"])
    reference = f"gpuslice-test/commit-{uuid.uuid4().hex[:8]}:1"
    try:
        answer = await answer_of(runner_for(runtime, link), manager, request(
            CommitAsk(reference=reference, labels={}), spec.session_id))
        assert answer.error == "", answer.error
        # the image's own files, with no tmpfs over them: nothing of SSH's, no secret
        seen = await asyncio.to_thread(subprocess.run, [
            "docker", "run", "--rm", "--entrypoint", "sh", reference, "-c",
            f"ls -A {ssh.SSH_DIR}; grep -rl hf_secret_f9 /tmp /etc /home /root"],
            capture_output=True, text=True, timeout=scaled(60))
        assert "sshd_config" not in seen.stdout and "host_ed25519" not in seen.stdout
        assert "authorized_keys" not in seen.stdout and "hf_secret" not in seen.stdout
        # the session itself still takes SSH: the same host key (now), or a new one (before)
        await ssh.prepare(runtime, spec.session_id, OpenSsh(keys=[SSH_KEY]))
        again = await runtime.exec(spec.session_id, ["cat", f"{ssh.SSH_DIR}/host_ed25519.pub"])
        assert again.stdout.startswith("ssh-ed25519 ")
        assert (again.stdout == host_key.stdout) is (made == "now")
    finally:
        await runtime.remove(spec.session_id)
        await runtime.remove_image(reference)


def test_answers_travel_as_their_kind() -> None:
    # what FakeManager parses is what the agent sends: the discriminator picks the model
    body = json.dumps({"kind": "exec", "exit_code": 0, "stdout": "", "stderr": "", "error": ""})
    assert ANSWERS.validate_json(body).kind == "exec"
