"""``gpuslice-save PATH [--name NAME]``: save a file or a directory to the model store.

Inside a session, through the in-session endpoint only (no key, no manager address): the
platform answers either short-lived upload URLs for the session owner's prefix in the S3
store (the files go there directly) or ``stream`` for a local store (the files go through the
node's agent). Either way the model exists only once every file arrived. Symbolic links and
special files in a directory are left out (and said so). Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlencode

import gpuslice_endpoint

MiB = 1024 * 1024
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class SaveError(Exception):
    """Saving failed; ``str()`` says why, in one line."""


@dataclass(frozen=True)
class Saved:
    name: str
    files: int
    size: int
    version: int = 0  # the save's number among its name's versions (1, 2, …)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpuslice-save",
        description="Save a file or directory to the model store (yours only, from this "
        "session): e.g. gpuslice-save output --name resnet-1",
    )
    parser.add_argument("path", help="A file, or a directory (saved with what it holds).")
    parser.add_argument("--name", help="The model's name (default: the path's last part).")
    args = parser.parse_args(argv)
    try:
        saved = save(args.path, args.name, say=lambda line: print(line, file=sys.stderr))
    except (SaveError, gpuslice_endpoint.EndpointError) as err:
        print(f"gpuslice-save: {err}", file=sys.stderr)
        return 1
    print(f"saved model {saved.name} version {saved.version}: {saved.files} file(s), "
          f"{_size(saved.size)}")
    return 0


def save(path: str, name: str | None = None, say: object = None) -> Saved:
    """Save ``path`` as model ``name``; raises SaveError or gpuslice_endpoint.EndpointError."""
    tell = say if callable(say) else (lambda line: None)
    name = name or _default_name(path)
    if not _NAME.match(name):
        raise SaveError(f"model name {name!r}: use 1-128 letters, digits, '.', '_' or '-'")
    files = _collect(path, tell)
    if not files:
        raise SaveError(f"nothing to save in {path}")
    total = sum(size for _, _, size in files)
    tell(f"saving {len(files)} file(s), {_size(total)}, as model {name}")
    listed = [{"path": rel, "size": size} for rel, _, size in files]
    started = gpuslice_endpoint.call("POST", "/v1/models/uploads",
                                     {"name": name, "files": listed})
    for rel, source, size in files:
        if started["mode"] == "presigned":
            _put_url(started["urls"][rel], source, size, started.get("headers", {}))
        else:
            query = urlencode({"upload_id": started["upload_id"], "path": rel})
            with open(source, "rb") as f:
                gpuslice_endpoint.send_file("PUT", f"/v1/models/file?{query}", f, size)
    done = gpuslice_endpoint.call("POST", "/v1/models/complete",
                                  {"upload_id": started["upload_id"]})
    return Saved(name, len(files), total, int(done.get("version", 0)))


def _collect(path: str, tell: object) -> list[tuple[str, str, int]]:
    """``(path in the model, path here, size)`` of every regular file under ``path``."""
    say = tell if callable(tell) else (lambda line: None)
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise SaveError(f"cannot read {path}: {exc.strerror}") from None
    if stat.S_ISREG(st.st_mode):
        return [(os.path.basename(os.path.normpath(path)), path, st.st_size)]
    if not stat.S_ISDIR(st.st_mode):
        raise SaveError(f"{path} is neither a file nor a directory")
    found = []
    for top, dirs, names in os.walk(path):
        dirs.sort()
        for entry in sorted(names) + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            full = os.path.join(top, entry)
            info = os.lstat(full)
            rel = os.path.relpath(full, path).replace(os.sep, "/")
            if stat.S_ISREG(info.st_mode):
                found.append((rel, full, info.st_size))
            else:
                say(f"gpuslice-save: leaving out {rel} (not a regular file)")
    return found


def _put_url(url: str, source: str, size: int, signed: dict[str, str]) -> None:
    with open(source, "rb") as f:
        # urllib would label the body a form (and some servers then parse it as one); the
        # length and ``signed`` are part of the URL's signature: the store refuses others
        headers = {**signed, "Content-Length": str(size),
                   "Content-Type": "application/octet-stream"}
        request = urllib.request.Request(url, data=f, method="PUT", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=300) as answer:
                answer.read()
        except urllib.error.HTTPError as err:
            raise SaveError(f"the store refused {source}: HTTP {err.code} "
                            f"{err.read()[:200].decode(errors='replace')}") from None
        except (urllib.error.URLError, OSError) as err:
            raise SaveError(f"the store cannot be reached for {source}: {err}") from None


def _default_name(path: str) -> str:
    base = os.path.basename(os.path.normpath(os.path.abspath(path)))
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", base).lstrip("._-")
    return cleaned[:128] or "model"


def _size(size: int) -> str:
    return f"{size / MiB:.1f} MiB" if size >= MiB else f"{size} bytes"
