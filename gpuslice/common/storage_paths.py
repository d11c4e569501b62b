"""Paths inside a storage folder, as users give them: one rule for the CLI, SDK and manager.

A path is relative POSIX (``data/train.csv``): no ``..`` part, not absolute, no empty or
``.`` parts, no NUL, at most 4096 bytes, each part at most 255 bytes. What a path *points at*
(symbolic links, device files) is checked where the files are: ``manager/services/storage``.

Names on disk are bytes, and a session may write one that is not UTF-8
(``printf x > "$(printf 'bad\\377name')"``). Inside the manager such a path is a ``str`` whose
odd bytes are lone surrogates (Python's ``surrogateescape``, what ``os`` functions take and
give); the API shows it readable (:func:`shown`: the odd bytes as U+FFFD) and addresses it by
its raw form (:func:`raw_form`: the bytes percent-encoded, ``bad%FFname``), which
:func:`from_raw` reads back. The rules above apply to the bytes either way.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import quote, unquote_to_bytes

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
    if len(_bytes(value, text)) > MAX_PATH:
        raise PathRuleError(f"path {value[:40]!r}...: longer than {MAX_PATH} bytes")
    if text.startswith("/") or text.startswith("\\"):
        raise PathRuleError(
            f"path {value!r}: absolute paths are not allowed; give it relative to the folder"
        )
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PathRuleError(f"path {value!r}: '..' is not allowed (paths stay inside the folder)")
    for part in parts:
        if len(_bytes(value, part)) > MAX_PART:
            raise PathRuleError(f"path {value!r}: a name is longer than {MAX_PART} bytes")
    if not parts and not allow_root:
        raise PathRuleError(f"path {value!r}: name a file or directory inside the folder")
    return str(PurePosixPath(*parts)) if parts else ""


def from_raw(raw: str) -> str:
    """The path whose bytes ``raw`` percent-encodes (:func:`raw_form`), in ``os``'s spelling."""
    return unquote_to_bytes(raw).decode("utf-8", "surrogateescape")


def raw_form(path: str) -> str | None:
    """``path``'s bytes percent-encoded when they are not UTF-8 (``None`` when they are): the
    form the API accepts back as ``raw_path``."""
    data = path.encode("utf-8", "surrogateescape")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return quote(data, safe="/")
    return None


def path_query(path: str) -> dict[str, str]:
    """The query naming ``path`` in the API: ``path``, or ``raw_path`` when it is not UTF-8
    (a name read from a listing, or given on a command line as bytes)."""
    raw = raw_form(path)
    return {"path": path} if raw is None else {"raw_path": raw}


def entry_path(path: str, raw_path: str | None) -> str:
    """The path a listing entry stands for (``os``'s spelling): its raw form when it has one."""
    return path if raw_path is None else from_raw(raw_path)


def shown(path: str) -> str:
    """``path`` for people: bytes that are not UTF-8 (and stray surrogates) shown as U+FFFD."""
    text = "".join("\ufffd" if _stray(c) else c for c in path)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _bytes(value: str, text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        raise PathRuleError(f"path {shown(value)!r}: holds characters that are not Unicode "
                            "text; name a file that is not UTF-8 by its raw_path (its bytes "
                            "percent-encoded)") from None


def _stray(char: str) -> bool:
    """A surrogate that ``surrogateescape`` did not make (it stands for no byte)."""
    return "\ud800" <= char <= "\udfff" and not "\udc80" <= char <= "\udcff"
