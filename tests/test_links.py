"""Every relative link in the repository's Markdown resolves to a file in the repository.

Read: README.md, CONTRIBUTING.md, docs/*.md and the README.md beside each part. A link's file
must exist under the repository root (a link that climbs out of it is broken even where the
file happens to be there); its anchor, when it has one, must name a heading of that file.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Installed or built things that carry READMEs of their own (npm packages, build copies).
NOT_OURS = {"node_modules", "build", "dist"}

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+).*?\1")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def documents() -> list[Path]:
    found = {ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")}
    for readme in ROOT.rglob("README.md"):
        parts = readme.relative_to(ROOT).parts
        if not any(part.startswith(".") or part in NOT_OURS for part in parts):
            found.add(readme)
    return sorted(found)


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of each inline link or image outside code."""
    out = []
    for number, line in enumerate(_prose(text), start=1):
        if line is not None:
            out += [(number, m.group(1)) for m in _LINK.finditer(_CODE_SPAN.sub("", line))]
    return out


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a file's headings (a repeated one gets -1, -2, …)."""
    seen: Counter[str] = Counter()
    out = set()
    for line in _prose(text):
        heading = _HEADING.match(line or "")
        if heading:
            slug = _slug(heading.group(1))
            out.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
            seen[slug] += 1
    return out


def broken(document: Path, text: str | None = None) -> list[str]:
    """What is wrong with document's links (its text, or the text given as if it were there)."""
    text = document.read_text() if text is None else text
    problems = []
    for number, target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http:, https:, mailto:: not a file of ours
        path, _, anchor = target.partition("#")
        where = f"{document.relative_to(ROOT)}:{number}: {target}"
        file = (document.parent / path).resolve() if path else document
        if not file.is_relative_to(ROOT):
            problems.append(f"{where}: outside the repository")
        elif not file.is_file():
            problems.append(f"{where}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            problems.append(f"{where}: no heading with this anchor")
    return problems


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(document: Path) -> None:
    assert not broken(document)


def test_the_documents_read_include_every_part() -> None:
    read = {str(p.relative_to(ROOT)) for p in documents()}
    assert {"README.md", "CONTRIBUTING.md", "docs/architecture.md", "tests/README.md",
            "gpuslice/manager/README.md"} <= read
    assert not any("node_modules" in p for p in read)


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    """The check itself can fail: a missing file, a climb out of the root, a wrong anchor."""
    assert links("[a](x.md) `[b](y.md)`\n```\n[c](z.md)\n```\n![d](p.png \"t\")") == [
        (1, "x.md"), (5, "p.png")]
    assert anchors("# A: `b` c\n## A: b c\n```\n# not\n```") == {"a-b-c", "a-b-c-1"}
    doc = ROOT / "docs" / "architecture.md"
    assert not broken(doc, "[ok](../README.md#a-five-minute-walk-through) [me](#decisions)")
    outside = tmp_path / "outside.md"
    outside.write_text("a file that exists, outside the repository")
    for target in ("missing.md", "../README.md#no-such-heading", "#no-such-heading",
                   os.path.relpath(outside, doc.parent)):
        assert broken(doc, f"[x]({target})"), target


def _prose(text: str) -> list[str | None]:
    """The file's lines, None for those in fenced code blocks (fences included)."""
    out: list[str | None] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            out.append(None)
        else:
            out.append(None if fenced else line)
    return out


def _slug(heading: str) -> str:
    text = _CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
