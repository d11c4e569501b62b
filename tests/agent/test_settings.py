"""Agent settings: TOML file, GPUSLICE_AGENT_* environment, exact units."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuslice.agent.settings import AgentSettings, load_agent_settings
from gpuslice.common.resources import GiB, MiB

TOML = """
node_name = "lab-01"
manager_url = "https://manager.internal:8443"
join_token = "s3cret"
accelerator = "mock"
fgpu_per_gpu = 2
reserved_cpu = "0.5"
reserved_mem = "2g"
watchdog_tolerance = "256m"

[hard_caps]
mode = "hami"
hami_library = "/opt/hami/libvgpu.so"

[[gpu]]
model = "Mock A100"
memory = "8GiB"
sms = 108
count = 2

[[gpu]]
model = "Mock T4"
memory = "16g"
sms = 40
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(TOML)
    return path


def test_toml_file_is_read_with_exact_units(config_file: Path) -> None:
    settings = load_agent_settings(config_file)
    assert settings.node_name == "lab-01"
    assert settings.join_token is not None and settings.join_token.get_secret_value() == "s3cret"
    assert settings.accelerator == "mock"
    assert settings.fgpu_per_gpu == 2000
    assert settings.reserved_cpu == 500
    assert settings.reserved_mem == 2 * GiB
    assert settings.watchdog_tolerance == 256 * MiB
    assert settings.hard_caps.mode == "hami"
    assert settings.hard_caps.hami_library == Path("/opt/hami/libvgpu.so")
    assert [(g.model, g.memory, g.sms, g.count) for g in settings.gpu] == [
        ("Mock A100", 8 * GiB, 108, 2),
        ("Mock T4", 16 * GiB, 40, 1),
    ]


def test_environment_wins_over_file_and_arguments_win_over_both(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSLICE_AGENT_NODE_NAME", "from-env")
    monkeypatch.setenv("GPUSLICE_AGENT_HARD_CAPS__MODE", "mps")
    settings = load_agent_settings(config_file)
    assert settings.node_name == "from-env"
    assert settings.hard_caps.mode == "mps"
    assert load_agent_settings(config_file, node_name="explicit").node_name == "explicit"


def test_defaults_without_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUSLICE_AGENT_NODE_NAME", raising=False)
    settings = load_agent_settings()
    assert settings.accelerator == "auto"
    assert settings.gpu == []
    assert settings.hard_caps.mode == "none"
    assert settings.session_user == "1000:1000"


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_agent_settings(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("accelerator", "amd"),
        ("session_user", "0:0"),
        ("fgpu_per_gpu", "0"),
        ("reserved_cpu", "-1"),
        ("node_name", "has space"),
        ("unknown_option", 1),
    ],
)
def test_invalid_values_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        AgentSettings(**{field: value})


def test_mock_gpu_memory_must_be_a_size() -> None:
    with pytest.raises(ValidationError, match="not a size; write e.g. 512m"):
        AgentSettings(gpu=[{"model": "X", "memory": "lots"}])


def test_defaults_are_in_exact_units():
    settings = AgentSettings(node_name="n")
    assert settings.reserved_cpu == 500  # half a core, in milli-cores
    assert settings.reserved_mem == 1024**3
