"""Session images: the names gpuslice builds, and the labels images describe themselves with.

An image describes itself with Docker labels (all optional; an image without them is a plain
image that still works):

- ``gpuslice.image.title``: display name, e.g. ``scikit-learn 1.5 (CPU)``
- ``gpuslice.image.frameworks``: JSON object of framework -> version, e.g.
  ``{"python": "3.11", "scikit-learn": "1.5.2"}``
- ``gpuslice.image.min-gpu`` / ``.min-cpu`` / ``.min-mem``: minimum resources a session of the
  image needs (``0.5``, ``1``, ``2g``)
- ``gpuslice.image.gpu``: ``true`` if the image can use a GPU
- ``gpuslice.image.apps``: JSON list of the apps the image serves, each
  ``{"name", "protocol", "port"}`` plus, for apps the platform starts (on first open or at
  session start), ``"command"`` (argv; ``{port}``, ``{base_path}`` and ``{token}`` are filled
  in as by Python's ``str.format``, so a literal brace is doubled), ``"base_path"`` (true
  when the command places the app under its proxy path, e.g. Jupyter's
  ``--ServerApp.base_url={base_path}``; false: the proxy strips the path prefix) and
  ``"start_timeout"`` (seconds before a start that does not answer is a failure, default 60).
  The name ``terminal`` is the platform's own (every session has a terminal).
- ``gpuslice.image.owner`` / ``.origin-session``: set on images committed from a session
- ``gpuslice.image.kind``: ``internal`` (a building block, e.g. the root filesystem) or ``test``
  (built by the test suite): such images stay usable by name but are not offered in the launch
  dialog's environment list (``image_kind``)
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass, field
from typing import Any

from gpuslice import __version__
from gpuslice.common.image_refs import is_user_image
from gpuslice.common.resources import ResourceError, parse_cpu, parse_fgpu, parse_mem

BASE_REPO = "gpuslice/base"
# The standard session image: Python, pip and a shell. `gpuslice up` builds it when missing,
# and `gpuslice session create` uses it when no --image is given.
DEFAULT_SESSION_IMAGE = f"{BASE_REPO}:{__version__}"

LABEL_PREFIX = "gpuslice.image."
LABEL_TITLE = "gpuslice.image.title"
LABEL_FRAMEWORKS = "gpuslice.image.frameworks"
LABEL_MIN_GPU = "gpuslice.image.min-gpu"
LABEL_MIN_CPU = "gpuslice.image.min-cpu"
LABEL_MIN_MEM = "gpuslice.image.min-mem"
LABEL_GPU = "gpuslice.image.gpu"
LABEL_APPS = "gpuslice.image.apps"
LABEL_OWNER = "gpuslice.image.owner"
LABEL_ORIGIN_SESSION = "gpuslice.image.origin-session"
LABEL_KIND = "gpuslice.image.kind"

# What the catalog calls an image (``image_kind``); the launch dialog lists the standard image
# first, offers frameworks, private and other images, and hides internal and test ones.
KIND_STANDARD, KIND_FRAMEWORK, KIND_OTHER = "standard", "framework", "other"
KIND_PRIVATE, KIND_INTERNAL, KIND_TEST = "private", "internal", "test"
HIDDEN_KINDS = frozenset({KIND_INTERNAL, KIND_TEST})
# Images built before the kind label: the root filesystem the standard image is built from (in
# gpuslice's namespace or a side build's, e.g. gpuslice-ml/rootfs), and the test suite's own
# namespace.
_INTERNAL_NAME = "rootfs"
_TEST_NAMESPACE = "gpuslice-test/"

_APP_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_PROTOCOLS = frozenset({"http", "tcp", "ws"})
#: What an app's start command may name: filled in when the app is started.
APP_PLACEHOLDERS = frozenset({"port", "base_path", "token"})
#: Every session's own app (a TTY exec): an image cannot declare an app of that name.
TERMINAL_APP = "terminal"
_FORMAT = string.Formatter()
DEFAULT_START_TIMEOUT = 60
TITLE_MAX = 200  # characters of a title shown; the rest of a longer label is cut


@dataclass(frozen=True, slots=True)
class ImageApp:
    """An app an image serves: reached by the proxy at ``port`` inside the container, and
    started with ``command`` (when it has one) the first time it is opened."""

    name: str
    protocol: str
    port: int
    command: tuple[str, ...] = ()
    base_path: bool = False
    start_timeout: int = DEFAULT_START_TIMEOUT  # seconds

    def argv(self, *, port: int, base_path: str, token: str) -> list[str]:
        """The start command with its placeholders filled in."""
        return [arg.format(port=port, base_path=base_path, token=token) for arg in self.command]

    def to_label(self) -> dict[str, Any]:
        item: dict[str, Any] = {"name": self.name, "protocol": self.protocol, "port": self.port}
        if self.command:
            item |= {"command": list(self.command), "base_path": self.base_path}
        if self.start_timeout != DEFAULT_START_TIMEOUT:
            item["start_timeout"] = self.start_timeout
        return item


@dataclass(frozen=True, slots=True)
class ImageMeta:
    """What an image says about itself. Exact units: milli-fGPU, milli-cores, bytes."""

    title: str = ""
    frameworks: dict[str, str] = field(default_factory=dict)
    min_gpu: int = 0
    min_cpu: int = 0
    min_mem: int = 0
    gpu: bool = False
    apps: tuple[ImageApp, ...] = ()
    owner: str | None = None
    origin_session: str | None = None
    kind: str = ""  # the kind label as given (``image_kind`` decides)
    problems: tuple[str, ...] = ()  # labels that were present but unusable (ignored)

    @classmethod
    def from_labels(cls, labels: dict[str, str] | None) -> ImageMeta:
        """Read the labels; a malformed label is ignored and named in ``problems``."""
        labels = labels or {}
        problems: list[str] = []
        values: dict[str, Any] = {
            "title": labels.get(LABEL_TITLE, "")[:TITLE_MAX],
            "gpu": labels.get(LABEL_GPU, "").strip().lower() in ("1", "true", "yes"),
            "owner": labels.get(LABEL_OWNER) or None,
            "origin_session": labels.get(LABEL_ORIGIN_SESSION) or None,
            "kind": labels.get(LABEL_KIND, "").strip().lower()[:32],
        }
        for key, name, parse in (
            (LABEL_MIN_GPU, "min_gpu", parse_fgpu),
            (LABEL_MIN_CPU, "min_cpu", parse_cpu),
            (LABEL_MIN_MEM, "min_mem", parse_mem),
        ):
            if labels.get(key):
                try:
                    values[name] = parse(labels[key], field=key)
                except ResourceError as err:
                    problems.append(err.message)
        values["frameworks"] = _frameworks(labels.get(LABEL_FRAMEWORKS), problems)
        values["apps"] = _apps(labels.get(LABEL_APPS), problems)
        return cls(**values, problems=tuple(problems))

    def to_labels(self) -> dict[str, str]:
        """The labels that state this metadata (for recipes and commits)."""
        labels = {LABEL_GPU: "true" if self.gpu else "false"}
        if self.title:
            labels[LABEL_TITLE] = self.title
        if self.frameworks:
            labels[LABEL_FRAMEWORKS] = json.dumps(self.frameworks, sort_keys=True)
        if self.apps:
            labels[LABEL_APPS] = json.dumps([a.to_label() for a in self.apps])
        for key, value, unit in ((LABEL_MIN_GPU, self.min_gpu, 1000),
                                 (LABEL_MIN_CPU, self.min_cpu, 1000)):
            if value:
                labels[key] = str(value / unit)
        if self.min_mem:
            labels[LABEL_MIN_MEM] = str(self.min_mem)
        if self.owner:
            labels[LABEL_OWNER] = self.owner
        if self.origin_session:
            labels[LABEL_ORIGIN_SESSION] = self.origin_session
        if self.kind:
            labels[LABEL_KIND] = self.kind
        return labels


def image_kind(reference: str, meta: ImageMeta, *, public: bool = True) -> str:
    """What the catalog calls ``reference``: ``standard`` (the default session image's
    repository), ``internal`` / ``test`` (by label, or by name for images from before the
    label), ``private`` (a user's own), ``framework`` (it names a title or frameworks) or
    ``other`` (a plain image)."""
    repository = reference.rsplit("@", 1)[0].rsplit(":", 1)[0]
    if meta.kind in HIDDEN_KINDS:
        return meta.kind
    namespace, _, last = repository.rpartition("/")
    if last == _INTERNAL_NAME and namespace.startswith("gpuslice"):
        return KIND_INTERNAL
    if reference.startswith(_TEST_NAMESPACE):
        return KIND_TEST
    if repository == BASE_REPO:
        return KIND_STANDARD
    if not public or meta.owner or is_user_image(reference):
        return KIND_PRIVATE
    return KIND_FRAMEWORK if meta.title or meta.frameworks else KIND_OTHER


def _frameworks(raw: str | None, problems: list[str]) -> dict[str, str]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        problems.append(f"{LABEL_FRAMEWORKS}: not JSON")
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int | float) for k, v in value.items()
    ):
        problems.append(f"{LABEL_FRAMEWORKS}: expected an object of name -> version")
        return {}
    return {k[:64]: str(v)[:64] for k, v in list(value.items())[:32]}


def _apps(raw: str | None, problems: list[str]) -> tuple[ImageApp, ...]:
    if not raw:
        return ()
    try:
        value = json.loads(raw)
    except ValueError:
        problems.append(f"{LABEL_APPS}: not JSON")
        return ()
    apps: list[ImageApp] = []
    for item in value if isinstance(value, list) else [None]:
        if not isinstance(item, dict) or not _valid_app(item):
            problems.append(f"{LABEL_APPS}: {item!r} is not {{name, protocol, port}}")
            continue
        why = _app_problem(item, apps)
        if why:
            problems.append(f"{LABEL_APPS}: {item['name']}: {why}")
            continue
        apps.append(ImageApp(
            item["name"], item["protocol"], item["port"], tuple(item.get("command") or ()),
            bool(item.get("base_path", False)),
            int(item.get("start_timeout", DEFAULT_START_TIMEOUT)),
        ))
    return tuple(apps)


def _valid_app(item: dict[str, Any]) -> bool:
    name, port = item.get("name"), item.get("port")
    return (
        isinstance(name, str) and bool(_APP_NAME.match(name))
        and item.get("protocol") in _PROTOCOLS
        and isinstance(port, int) and 1 <= port <= 65535
    )


def _app_problem(item: dict[str, Any], earlier: list[ImageApp]) -> str:
    """Why an app's optional fields are unusable ("" when they are fine)."""
    if item["name"] == TERMINAL_APP:
        return "the name is the platform's own terminal"
    if any(a.name == item["name"] for a in earlier):
        return "declared twice"
    command = item.get("command", [])
    if not isinstance(command, list) or len(command) > 64 or not all(
        isinstance(arg, str) and len(arg) <= 1024 for arg in command
    ):
        return "command must be a list of at most 64 strings"
    try:
        fields = [parsed for arg in command for parsed in _FORMAT.parse(arg)
                  if parsed[1] is not None]
    except ValueError as exc:  # a lone brace
        return f"command: {exc} (a literal brace is written twice)"
    # A width or precision is applied on every listing: {port:>999999999} is a gigabyte.
    shaped = next((f for _, f, spec, conv in fields if spec or conv), None)
    if shaped is not None:
        return (f"command: {{{shaped}}} has a format spec or conversion; placeholders are "
                "written bare, e.g. {port}")
    unknown = {field for _, field, _, _ in fields} - APP_PLACEHOLDERS
    if unknown:
        named = ", ".join(sorted(f"{{{field}}}" for field in unknown))
        return f"command names {named}; placeholders are {', '.join(sorted(APP_PLACEHOLDERS))}"
    if not isinstance(item.get("base_path", False), bool):
        return "base_path must be true or false"
    if item.get("base_path") and not any("{base_path}" in arg for arg in command):
        return "base_path is true but the command never names {base_path}"
    timeout = item.get("start_timeout", DEFAULT_START_TIMEOUT)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 3600:
        return "start_timeout must be whole seconds from 1 to 3600"
    return ""
