"""Unknown setting names, in a settings file or a ``GPUSLICE_*`` variable, stop the start.

A misspelt setting (``GPUSLICE_SCHEDULER__POLCY=drf``, ``[auth] foo = 1``) would otherwise be
ignored, and the component would run on the default without a word. ``unknown_setting`` walks
the TOML file's keys and the environment's names against a settings tree's fields, at every
depth, and answers the first unknown one in one line naming the closest setting.

Not every ``GPUSLICE_*`` variable is a setting: the in-session variables the agent gives every
session, the CLI's own, the image builds' and the tests'. Those are named below
(``NOT_SETTINGS``, ``NOT_SETTINGS_PREFIXES``) and never checked; a new variable of that kind
goes here too (``tests/common/test_settings_names.py`` finds every ``GPUSLICE_*`` name in the
repository and fails on one that is neither a setting nor listed).
"""

from __future__ import annotations

import difflib
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

NOT_SETTINGS_PREFIXES = (
    "GPUSLICE_TEST_",  # the test suite's switches (GPUSLICE_TEST_PG, …)
    "GPUSLICE_FUZZ_",  # the API fuzzer's (GPUSLICE_FUZZ_SEED, GPUSLICE_FUZZ_EXAMPLES)
    "GPUSLICE_GPU_",  # in a session: its slice (GPUSLICE_GPU_FRACTION, …; agent/runtime/spec.py)
    "GPUSLICE_MANAGER_",  # deploy/haproxy.cfg's replicas (GPUSLICE_MANAGER_1, …)
)
NOT_SETTINGS = frozenset({
    # the CLI and the SDK (client/config.py)
    "GPUSLICE_URL", "GPUSLICE_TOKEN", "GPUSLICE_CLIENT_CONFIG",
    # in a session: what the agent and the manager give it (agent/runtime/spec.py,
    # timelimits, priorities, runs) and the framework hook's own
    "GPUSLICE_SESSION_ID", "GPUSLICE_OWNER", "GPUSLICE_SESSION_TYPE", "GPUSLICE_NODE",
    "GPUSLICE_ACCELERATOR", "GPUSLICE_CPU", "GPUSLICE_MEMORY_BYTES", "GPUSLICE_FGPU",
    "GPUSLICE_ALLOCATION_FILE", "GPUSLICE_ENDPOINT", "GPUSLICE_TIME_LIMIT",
    "GPUSLICE_PREEMPT_GRACE_S", "GPUSLICE_RUN_NAME", "GPUSLICE_HOOK", "GPUSLICE_HOOK_DEBUG",
    # image builds (imagebuild/, scripts/build-images*.sh, the Makefile)
    "GPUSLICE_IMAGE_SOURCE", "GPUSLICE_EXTRA_CA_BUNDLE", "GPUSLICE_TORCH_INDEX",
    "GPUSLICE_REGISTRY_BASE_IMAGE", "GPUSLICE_IMAGE_CACHE", "GPUSLICE_DEBIAN_MIRROR",
    "GPUSLICE_SCIPY_VERSIONS", "GPUSLICE_APP_RECIPES",
    # the platform tests' and the cluster's (tests/, deploy/haproxy.cfg)
    "GPUSLICE_ARTIFACTS", "GPUSLICE_LB_BIND",
})


class UnknownSetting(ValueError):
    """A key no setting has; the message names it, where it was and the closest setting."""


def unknown_setting(
    model: type[BaseModel], toml_file: Path | None, environ: Mapping[str, str], prefix: str,
    others: tuple[str, ...] = (),
) -> str | None:
    """The first unknown key of ``toml_file`` or of the ``prefix`` variables in ``environ``,
    in one line; None when all are settings. ``others``: prefixes of other components'
    trees (the manager's ``GPUSLICE_`` leaves ``GPUSLICE_AGENT_`` to the agent)."""
    if toml_file is not None:
        with toml_file.open("rb") as handle:
            data = tomllib.load(handle)
        for path, known in _unknown_keys(model, data, ()):
            return (f"unknown setting {_dotted(path)} in {toml_file}; "
                    f"{_closest(path, known, _dotted)}")
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(prefix) or not _is_setting(upper, others):
            continue
        found = _unknown_env(model, upper[len(prefix):].lower().split("__"))
        if found is not None:
            path, known = found
            return (f"unknown setting {name} in the environment; "
                    f"{_closest(path, known, lambda p: prefix + '__'.join(p).upper())} "
                    "(or unset it)")
    return None


def _is_setting(name: str, others: tuple[str, ...]) -> bool:
    return name not in NOT_SETTINGS and not name.startswith((*NOT_SETTINGS_PREFIXES, *others))


def _unknown_keys(
    model: type[BaseModel], data: Mapping[str, Any], path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            yield (*path, key), list(model.model_fields)
            continue
        inner = _inner_model(field.annotation)
        if inner is None:
            continue
        if isinstance(value, Mapping):
            yield from _unknown_keys(inner, value, (*path, key))
        elif isinstance(value, list):  # [[gpu]] tables
            for i, item in enumerate(value):
                if isinstance(item, Mapping):
                    yield from _unknown_keys(inner, item, (*path, f"{key}[{i}]"))


def _unknown_env(
    model: type[BaseModel], parts: list[str]
) -> tuple[tuple[str, ...], list[str]] | None:
    current: type[BaseModel] | None = model
    for depth, part in enumerate(parts):
        known = list(current.model_fields) if current is not None else []
        if part not in known:
            return tuple(parts[:depth + 1]), known
        current = _inner_model(current.model_fields[part].annotation)  # type: ignore[union-attr]
    return None


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field holds (itself, in a list, or optional), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (list, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            inner = _inner_model(arg)
            if inner is not None:
                return inner
    return None


def _closest(path: tuple[str, ...], known: list[str], spell: Any) -> str:
    """``did you mean X?`` with the closest name at that depth, else the names there."""
    key = path[-1].split("[", 1)[0]
    match = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if match:
        return f"did you mean {spell((*path[:-1], match[0]))}?"
    if not known:
        return f"{spell(path[:-1])} has no settings inside it"
    where = f"in {spell(path[:-1])}" if len(path) > 1 else "at the top level"
    return f"the settings {where} are: {', '.join(spell((*path[:-1], k)) for k in known)}"


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path)
