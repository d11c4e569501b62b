"""Logs: one line per event, text or JSON, the session and node in context, no secret."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from gpuslice.common.logs import LogSettings, bind, configure, log_context, redact


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    yield stream
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_json_has_one_object_per_event_with_the_context(captured: io.StringIO) -> None:
    configure(LogSettings(format="json"), stream=captured)
    log = logging.getLogger("gpuslice.test")
    with log_context(node_id="n-1"):
        with log_context(session_id="s-1"):
            log.info("started\nsecond line")
        log.warning("node only")
    log.info("none")
    first, second, third = (json.loads(line) for line in _lines(captured))
    assert first["msg"] == "started\nsecond line"
    assert (first["session_id"], first["node_id"], first["level"]) == ("s-1", "n-1", "INFO")
    assert "session_id" not in second and second["node_id"] == "n-1"
    assert "node_id" not in third and third["logger"] == "gpuslice.test"


def test_text_keeps_a_traceback_on_one_line(captured: io.StringIO) -> None:
    configure(LogSettings(format="text"), stream=captured)
    try:
        raise ValueError("boom\nagain")
    except ValueError:
        logging.getLogger("gpuslice.test").exception("failed", extra={"session_id": "s-9"})
    [line] = _lines(captured)
    assert " ERROR gpuslice.test: failed session=s-9 | Traceback" in line
    assert "ValueError: boom\\nagain" in line


def test_debug_is_dropped_at_info(captured: io.StringIO) -> None:
    configure(LogSettings(level="info"), stream=captured)
    logging.getLogger("gpuslice.test").debug("noise")
    assert captured.getvalue() == ""


async def test_a_task_binding_stays_in_its_task(captured: io.StringIO) -> None:
    configure(LogSettings(format="json"), stream=captured)
    log = logging.getLogger("gpuslice.test")

    async def step(session_id: str) -> None:
        bind(session_id=session_id)
        await asyncio.sleep(0)
        log.info("step")

    await asyncio.gather(step("a"), step("b"))
    log.info("after")
    records = [json.loads(line) for line in _lines(captured)]
    assert sorted(r.get("session_id", "-") for r in records) == ["-", "a", "b"]


@pytest.mark.parametrize(("text", "secret"), [
    ("joined with gsj_Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OTA", "gsj_Zm9v"),
    ("header Authorization: Bearer gsn_abcdefghijklmnop", "abcdefghijklmnop"),
    ("bearer abc.def-ghi", "abc.def-ghi"),
    ("url postgresql+asyncpg://gpuslice:s3cr3t@db:5432/gpuslice", "s3cr3t"),
    ("password=hunter22 and more", "hunter22"),
    ("token: gsu_1234567890abcdef", "1234567890abcdef"),
])
def test_secrets_are_masked(text: str, secret: str) -> None:
    assert secret not in redact(text)
    assert "***" in redact(text)


def test_a_secret_in_an_exception_is_masked_too(captured: io.StringIO) -> None:
    configure(LogSettings(format="json"), stream=captured)
    try:
        raise RuntimeError("could not connect to postgresql://u:topsecret@db/x")
    except RuntimeError:
        logging.getLogger("gpuslice.test").exception("database")
    assert "topsecret" not in captured.getvalue()
