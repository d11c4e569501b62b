"""Apply a gpuslice session's GPU slice to PyTorch, TensorFlow and JAX, with no code change.

This file runs inside session containers, on whatever Python the image has (3.8 or newer), so
it uses the standard library only and imports nothing from gpuslice. It is loaded at
interpreter start (``sitecustomize.py`` beside it, on ``PYTHONPATH``; or a ``.pth`` file in
the base image) and installs a meta-path finder that waits for the frameworks:

- ``torch``: after import, queue ``torch.cuda.set_per_process_memory_fraction(f, i)`` for every
  visible device with ``torch.cuda._lazy_call``, so it runs when the program first uses CUDA
  (never initializing CUDA at import, which would break ``fork``-based multiprocessing).
- ``tensorflow``: after import, give every visible GPU one logical device with
  ``memory_limit`` = the slice (MiB); ``set_memory_growth`` on such a device becomes a no-op
  instead of the error TensorFlow would raise.
- ``jax``: before import, ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (lowered to the slice, never
  raised) and ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless the program set it.

The slice comes from the environment the agent sets: ``GPUSLICE_GPU_FRACTION`` (share of each
visible device, e.g. ``0.25``) and ``GPUSLICE_GPU_MEMORY_BYTES`` (per device). Nothing happens
when they are absent or the share is whole. ``GPUSLICE_HOOK=off`` disables the hook;
``GPUSLICE_HOOK_DEBUG=1`` reports what it does on stderr. It never raises into the program.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Mapping, MutableMapping, Optional, Sequence  # noqa: UP035

WATCHED = ("torch", "tensorflow", "jax")
MiB = 1024 * 1024

_finder: Optional[_SliceFinder] = None  # noqa: UP045


class Slice:
    """The part of each visible device this session may use."""

    def __init__(self, fraction: Decimal, memory_bytes: int) -> None:
        self.fraction = fraction
        self.memory_bytes = memory_bytes

    @property
    def memory_mib(self) -> int:
        return self.memory_bytes // MiB


def slice_from_env(environ: Mapping[str, str]) -> Optional[Slice]:  # noqa: UP045
    """The slice to apply, or ``None`` when there is nothing to cap (no GPU, whole devices)."""
    if environ.get("GPUSLICE_HOOK", "").lower() in ("0", "off", "false", "no"):
        return None
    try:
        fraction = Decimal(environ.get("GPUSLICE_GPU_FRACTION", ""))
        memory = int(environ.get("GPUSLICE_GPU_MEMORY_BYTES", "0"))
    except (InvalidOperation, ValueError):
        return None
    if not fraction.is_finite() or not 0 < fraction < 1 or memory <= 0:
        return None
    return Slice(fraction, memory)


def install(environ: Optional[MutableMapping[str, str]] = None) -> bool:  # noqa: UP045
    """Put the finder first on ``sys.meta_path`` (once). Returns whether a slice applies."""
    global _finder
    try:
        env = os.environ if environ is None else environ
        the_slice = slice_from_env(env)
        if the_slice is None or _finder is not None:
            return the_slice is not None
        _finder = _SliceFinder(the_slice, env)
        sys.meta_path.insert(0, _finder)
        for name in WATCHED:  # imported before us (rare): apply now
            if name in sys.modules and name != "jax":
                _finder.after_import(name, sys.modules[name])
        _debug(env, f"hook installed: {the_slice.fraction} of each GPU")
        return True
    except Exception as exc:  # never break interpreter start
        _warn(f"hook not installed: {exc!r}")
        return False


def apply_torch(torch: Any, the_slice: Slice, env: Mapping[str, str]) -> None:
    """Cap every visible device's caching allocator at the slice, when CUDA first starts."""
    cuda = getattr(torch, "cuda", None)
    if cuda is None:
        return
    fraction = float(the_slice.fraction)

    def cap() -> None:
        try:
            if not cuda.is_available():
                return
            count = cuda.device_count()
            for index in range(count):
                cuda.set_per_process_memory_fraction(fraction, index)
            _debug(env, f"torch: memory fraction {fraction} on {count} device(s)")
        except Exception as exc:  # a failed cap must not turn into a failed CUDA start
            _warn(f"torch: memory cap not applied: {exc!r}")

    lazy_call = getattr(cuda, "_lazy_call", None)
    if callable(lazy_call):
        lazy_call(cap)  # runs at CUDA's lazy init, or now if CUDA already started
    else:
        cap()


def apply_tensorflow(tf: Any, the_slice: Slice, env: Mapping[str, str]) -> None:
    """One logical device per visible GPU, limited to the slice's memory."""
    config = getattr(tf, "config", None)
    if config is None:
        return
    gpus = config.list_physical_devices("GPU")
    if not gpus:
        return
    make = getattr(config, "LogicalDeviceConfiguration", None)
    setter = getattr(config, "set_logical_device_configuration", None)
    if make is None or setter is None:  # TensorFlow < 2.4
        make = config.experimental.VirtualDeviceConfiguration
        setter = config.experimental.set_virtual_device_configuration
    capped: set[str] = set()
    for gpu in gpus:
        try:
            setter(gpu, [make(memory_limit=the_slice.memory_mib)])
            capped.add(getattr(gpu, "name", str(gpu)))
        except Exception as exc:  # e.g. the runtime already initialized this device
            _warn(f"tensorflow: memory limit not applied to {gpu}: {exc!r}")
    if capped:
        _tolerate_memory_growth(config, capped)
        _debug(env, f"tensorflow: memory_limit {the_slice.memory_mib} MiB on {len(capped)} GPU(s)")


def prepare_jax(env: MutableMapping[str, str], the_slice: Slice) -> None:
    """Set XLA's client memory fraction (never above the slice) before JAX reads it."""
    fraction = the_slice.fraction
    current = env.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    try:
        if current is not None and Decimal(current) <= fraction:
            fraction = Decimal(current)
    except InvalidOperation:
        pass
    env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(fraction)
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    _debug(env, f"jax: XLA_PYTHON_CLIENT_MEM_FRACTION={fraction}")


def chain_sitecustomize(own_file: str) -> None:
    """Run the next ``sitecustomize`` on ``sys.path`` (the image's own), as Python would have."""
    try:
        own_dir = os.path.dirname(os.path.realpath(own_file))
        rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != own_dir]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:
        _warn(f"error in the image's sitecustomize: {exc!r}")


class _SliceFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it wraps the real loader of a watched framework."""

    def __init__(self, the_slice: Slice, env: MutableMapping[str, str]) -> None:
        self.the_slice = the_slice
        self.env = env
        self.pending = set(WATCHED)

    def find_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]],  # noqa: UP045
        target: Any = None,
    ) -> Optional[importlib.machinery.ModuleSpec]:  # noqa: UP045
        if fullname not in self.pending:
            return None
        try:
            spec = self._real_spec(fullname, path, target)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            self.pending.discard(fullname)
            spec.loader = _Loader(spec.loader, fullname, self)
            return spec
        except Exception as exc:
            _warn(f"could not watch {fullname}: {exc!r}")
            return None

    def before_import(self, name: str) -> None:
        if name == "jax":
            _guard(lambda: prepare_jax(self.env, self.the_slice))

    def after_import(self, name: str, module: Any) -> None:
        if name == "torch":
            _guard(lambda: apply_torch(module, self.the_slice, self.env))
        elif name == "tensorflow":
            _guard(lambda: apply_tensorflow(module, self.the_slice, self.env))

    def _real_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]],  # noqa: UP045
        target: Any,
    ) -> Optional[importlib.machinery.ModuleSpec]:  # noqa: UP045
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None


class _Loader(importlib.abc.Loader):
    """Delegates to the real loader, and hands the module back to it once loaded."""

    def __init__(self, real: Any, name: str, finder: _SliceFinder) -> None:
        self.real = real
        self.name = name
        self.finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.real.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self.real
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.real
        self.finder.before_import(self.name)
        self.real.exec_module(module)  # the framework's own errors propagate unchanged
        self.finder.after_import(self.name, module)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.real, attr)


def _tolerate_memory_growth(config: Any, capped: set[str]) -> None:
    experimental = getattr(config, "experimental", None)
    original = getattr(experimental, "set_memory_growth", None)
    if experimental is None or original is None:
        return

    def set_memory_growth(device: Any, enable: bool) -> None:
        if getattr(device, "name", str(device)) in capped:
            return  # the slice's logical device already bounds this GPU's memory
        original(device, enable)

    experimental.set_memory_growth = set_memory_growth


def _guard(action: Callable[[], None]) -> None:
    try:
        action()
    except Exception as exc:
        _warn(f"slice not applied: {exc!r}")


def _debug(env: Mapping[str, str], message: str) -> None:
    if env.get("GPUSLICE_HOOK_DEBUG"):
        sys.stderr.write(f"gpuslice: {message}\n")


def _warn(message: str) -> None:
    try:
        sys.stderr.write(f"gpuslice: warning: {message}\n")
    except Exception:
        pass
