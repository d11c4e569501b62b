"""A misspelt setting stops the start in one line naming the closest setting, at any depth, in
the TOML file and in a GPUSLICE_* variable (issue 41, "Also"); the GPUSLICE_* variables that
are not settings never do."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from gpuslice.agent.settings import ENV_PREFIX, AgentSettings, load_agent_settings
from gpuslice.common.settings_names import UnknownSetting, unknown_setting
from gpuslice.manager.settings import ManagerSettings, load_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("variable", "said"), [
    ("GPUSLICE_SCHEDULER__POLCY", "did you mean GPUSLICE_SCHEDULER__POLICY?"),
    ("GPUSLICE_AUTH__FOO", "the settings in GPUSLICE_AUTH are: GPUSLICE_AUTH__LOGIN_TOKEN_TTL"),
    ("GPUSLICE_SCHEDULR__POLICY", "did you mean GPUSLICE_SCHEDULER?"),
    ("GPUSLICE_DATA_DIRR", "did you mean GPUSLICE_DATA_DIR?"),
    ("GPUSLICE_DATA_DIR__X", "GPUSLICE_DATA_DIR has no settings inside it"),
])
def test_an_unknown_manager_variable_is_refused_naming_the_closest(
    monkeypatch: pytest.MonkeyPatch, variable: str, said: str,
) -> None:
    monkeypatch.setenv(variable, "drf")
    with pytest.raises(UnknownSetting) as err:
        load_settings()
    message = str(err.value)
    assert message.startswith(f"unknown setting {variable} in the environment; {said}")
    assert "\n" not in message


def test_an_unknown_key_in_a_known_section_of_the_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "manager.toml"
    config.write_text('[scheduler]\npolcy = "drf"\n')
    with pytest.raises(UnknownSetting, match=r"^unknown setting scheduler\.polcy in "
                       rf"{re.escape(str(config))}; did you mean scheduler\.policy\?$"):
        load_settings(config)
    agent = tmp_path / "agent.toml"
    agent.write_text('node_name = "a"\n[hard_caps]\nmod = "mps"\n[[gpu]]\nmodle = "x"\n')
    with pytest.raises(UnknownSetting, match=r"hard_caps\.mod in .*did you mean "
                       r"hard_caps\.mode\?$"):
        load_agent_settings(agent)
    # arguments too: every section forbids what it does not have
    with pytest.raises(ValueError, match="polcy"):
        load_settings(scheduler={"polcy": "drf"})


def test_an_unknown_agent_variable_is_refused_and_the_managers_ignore_the_agents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUSLICE_AGENT_HARD_CAPS__MODDE", "mps")
    with pytest.raises(UnknownSetting, match="did you mean GPUSLICE_AGENT_HARD_CAPS__MODE"):
        load_agent_settings()
    assert load_settings().scheduler.policy == "fifo"  # the agent's are not the manager's


def test_the_variables_that_are_not_settings_never_stop_a_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("GPUSLICE_TEST_ANYTHING", "GPUSLICE_TORCH_INDEX", "GPUSLICE_URL",
                 "GPUSLICE_SESSION_ID", "GPUSLICE_GPU_FRACTION", "GPUSLICE_FUZZ_SEED"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("GPUSLICE_SCHEDULER__POLICY", "drf")
    assert load_settings().scheduler.policy == "drf"
    AgentSettings.check_names()


# the tests of misspelt settings, which name them on purpose, and the docs' example of one
MISSPELT_ON_PURPOSE = {"tests/common/test_settings_names.py", "tests/cli/test_unknown_settings.py"}
MISSPELT_EXAMPLES = {"GPUSLICE_SCHEDULER__POLCY"}


def test_every_gpuslice_variable_in_the_repository_is_a_setting_or_named_as_none() -> None:
    """A variable added anywhere (a tool, a test, the in-session environment) that is not a
    setting must be listed in common/settings_names.py, or it would stop every start."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    names: dict[str, str] = {}
    for relative in files:
        path = ROOT / relative
        if relative in MISSPELT_ON_PURPOSE or not path.is_file():
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for name in re.findall(r"\bGPUSLICE_[A-Z0-9_]*[A-Z0-9]\b", text):
            if name not in MISSPELT_EXAMPLES:
                names.setdefault(name, relative)
    assert "GPUSLICE_TORCH_INDEX" in names and "GPUSLICE_SCHEDULER__POLICY" in names
    refused = {}
    for name, where in sorted(names.items()):
        problem = (unknown_setting(ManagerSettings, None, {name: "1"}, "GPUSLICE_",
                                   ManagerSettings.env_others)
                   or unknown_setting(AgentSettings, None, {name: "1"}, ENV_PREFIX))
        if problem is not None:
            refused[name] = f"{where}: {problem}"
    assert refused == {}
