"""The test tree's own rule: no module imports a test module (``test_*.py``). What tests share
lives in helper modules (tests/README.md, "Shared pieces"): a test module imported by another
can be collected twice under some set-ups, leaks its fixtures into the importer, and hides a
helper where nobody looks for it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("tests", "bench", "tools")


def test_no_module_imports_a_test_module() -> None:
    ours = [(path, line, file) for path in _python_files() for line, module in _imported(path)
            if (file := _file_of(module))]
    # a scan that resolved none of the tree's own imports would pass whatever they were
    assert any(file == ROOT / "tests" / "waits.py" for *_, file in ours), "tests.waits unseen"
    wrong = [f"{path.relative_to(ROOT)}:{line}: imports {file.relative_to(ROOT)}"
             for path, line, file in ours if file.name.startswith("test_")]
    assert not wrong, "move what is shared into a helper module:\n" + "\n".join(wrong)


def _python_files() -> Iterator[Path]:
    for top in CHECKED:
        # npm's packages are not ours (tests/idp's Node ships a Python script for lldb)
        yield from sorted(p for p in (ROOT / top).rglob("*.py") if "node_modules" not in p.parts)


def _imported(path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of each module ``path`` imports, or may import: for ``from a import
    b``, both ``a`` and ``a.b`` (``b`` may be a module); relative imports resolved."""
    package = path.relative_to(ROOT).parent.parts
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else ()
            module = ".".join((*base, *filter(None, [node.module])))
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def _file_of(module: str) -> Path | None:
    """The repository's file of ``module``, if it is one (a module, not a package)."""
    candidate = ROOT.joinpath(*module.split(".")).with_suffix(".py")
    return candidate if candidate.is_file() else None
