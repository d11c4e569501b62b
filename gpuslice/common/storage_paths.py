"""Paths inside a storage folder, as users give them: one rule for the CLI, SDK and manager.

A path is relative POSIX (``data/train.csv``): no ``..`` part, not absolute, no empty or
``.`` parts, no NUL, at most 4096 bytes, each part at most 255 bytes. What a path *points at*
(symbolic links, device files) is checked where the files are: ``manager/services/storage``.
"""

from __future__ import annotations

from pathlib import PurePosixPath

MAX_PATH = 4096
MAX_PART = 255


class PathRuleError(ValueError):
    """A path breaks a rule; the message names the rule."""


def clean_path(value: str, *, allow_root: bool = False) -> str:
    """``value`` normalised (``a//b/`` → ``a/b``), or :class:`PathRuleError` naming the rule.

    ``allow_root``: the empty path (the folder itself) is accepted, e.g. to list its top.
    """
    text = value.strip()
    if "\x00" in text:
        raise PathRuleError(f"path {value!r}: NUL characters are not allowed")
    if len(text.encode()) > MAX_PATH:
        raise PathRuleError(f"path {value[:40]!r}...: longer than {MAX_PATH} bytes")
    if text.startswith("/") or text.startswith("\\"):
        raise PathRuleError(
            f"path {value!r}: absolute paths are not allowed; give it relative to the folder"
        )
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PathRuleError(f"path {value!r}: '..' is not allowed (paths stay inside the folder)")
    for part in parts:
        if len(part.encode()) > MAX_PART:
            raise PathRuleError(f"path {value!r}: a name is longer than {MAX_PART} bytes")
    if not parts and not allow_root:
        raise PathRuleError(f"path {value!r}: name a file or directory inside the folder")
    return str(PurePosixPath(*parts)) if parts else ""
