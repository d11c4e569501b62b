"""`gpuslice session port-forward`'s port arguments (the tunnels themselves: the platform's
tests/platform/test_port_forward.py)."""

from __future__ import annotations

import pytest

from gpuslice.client.forward import Forward, parse_forward


@pytest.mark.parametrize(("text", "forward"), [
    ("5000", Forward(5000, 5000)), ("8080:5000", Forward(8080, 5000)),
    ("0:22", Forward(0, 22)), ("65535:1", Forward(65535, 1)),
])
def test_a_port_or_local_colon_remote(text: str, forward: Forward) -> None:
    assert parse_forward(text) == forward


@pytest.mark.parametrize(("text", "says"), [
    ("http", "give PORT or LOCAL:REMOTE"), ("80:", "give PORT or LOCAL:REMOTE"),
    ("0", "ports are numbers from 1 to 65535"), ("70000", "ports are numbers from 1 to 65535"),
    ("1:2:3", "give PORT or LOCAL:REMOTE"), ("-1:80", "ports are numbers from 1 to 65535"),
])
def test_anything_else_is_refused_saying_what_is_allowed(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_forward(text)
