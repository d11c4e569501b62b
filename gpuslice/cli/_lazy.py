"""Commands that are imported when they run: click's "lazy subcommands" pattern on a Typer group.

A `LazyGroup` names its commands by ``module:attribute`` and imports one the first time it is
looked up to run (or to print its own help). While the group prints its *own* help, a stand-in
holding the command's one-line help takes its place, so that `gpuslice --help` imports no
command module. The stand-ins sit in ``commands`` from the start, so listings, their order and
"did you mean ...?" suggestions are those of eagerly registered commands.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

# Click's own types (Context, Command, HelpFormatter) are spelled Any here: recent typer
# versions vendor click as the private ``typer._click``, older ones use ``click``.


@dataclass(frozen=True, slots=True)
class Lazy:
    """A command imported on first use.

    ``target`` is ``"module:attribute"``: a `typer.Typer` (a command group) or a command
    function. ``help`` is its line in its parent's help: the first paragraph of its own help
    (tests/cli/test_lazy.py keeps the two equal).
    """

    target: str
    help: str

    def load(self, name: str) -> TyperCommand | TyperGroup:
        module, _, attribute = self.target.partition(":")
        found = getattr(importlib.import_module(module), attribute)
        if isinstance(found, typer.Typer):
            command: Any = typer.main.get_group(found)
        else:
            single = typer.Typer(add_completion=False)
            single.command(name)(found)
            command = typer.main.get_command(single)
        command.name = name
        _reflow_tree(command)
        return command


def reflow(text: str | None) -> str | None:
    """Help text whose paragraphs are each one line: Typer's rich mode keeps a docstring's
    line breaks, so a terminal narrower or wider than the source showed it ragged (a lone
    "the" on a line of its own). A paragraph marked ``\b`` (click's "do not rewrap") stays."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split("\n"))
                       for p in paragraphs)


def _reflow_tree(command: Any) -> None:
    command.help = reflow(command.help)
    for sub in getattr(command, "commands", {}).values():
        if not isinstance(sub, _StandIn):
            _reflow_tree(sub)


class LazyGroup(TyperGroup):
    """A Typer group whose ``lazy`` commands (by name, in listing order) load on first use."""

    lazy: ClassVar[Mapping[str, Lazy]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = False
        for name, entry in self.lazy.items():
            self.commands[name] = _StandIn(name, entry)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        if isinstance(command, _StandIn) and not self._listing:
            command = self.commands[cmd_name] = command.entry.load(cmd_name)
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True  # the listing needs each command's line only: keep the stand-ins
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


def lazy_group(commands: Mapping[str, Lazy]) -> type[LazyGroup]:
    """A `LazyGroup` class with these commands, for ``typer.Typer(cls=...)``."""
    return type("LazyGroup", (LazyGroup,), {"lazy": dict(commands)})


class _StandIn(TyperCommand):
    """A lazy command's name and one-line help, for its parent's listing."""

    def __init__(self, name: str, entry: Lazy) -> None:
        super().__init__(name, help=entry.help)
        self.entry = entry
