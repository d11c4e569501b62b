"""Exact resource arithmetic: parsing user input, formatting, and slice math.

Amounts are integers, never floats:
- ``gpu``: fGPU in milli-units (1 fGPU = 1000). User input allows at most 2 decimals, so every
  valid amount is a multiple of 10 milli.
- ``cpu``: cores in milli-units (1 core = 1000); at most 3 decimals.
- ``mem``: bytes.

A slice of ``f`` fGPU on a device of a node where 1 GPU = ``fgpu_per_gpu`` fGPU gets
``f / fgpu_per_gpu`` of the device's memory (bytes, rounded down) and of its SMs (rounded down).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal, InvalidOperation

MILLI = 1000
KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4
PiB = 1024**5

MAX_FGPU = Decimal(4096)
MAX_CPU = Decimal(4096)
MAX_MEM = 64 * TiB
MAX_FGPU_PER_GPU = Decimal(100)
FGPU_DECIMALS = 2
CPU_DECIMALS = 3
FRACTION_STEP = Decimal("0.0001")

_MEM_UNITS = {"": 1, "b": 1, "k": KiB, "m": MiB, "g": GiB, "t": TiB, "p": PiB}
_MEM_RE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>[kmgtp]?)(?:i?b)?\s*$", re.I)


class ResourceError(ValueError):
    """A resource amount given by a user is not acceptable; the message says what is allowed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class Resources:
    """An exact amount of every slot: gpu and cpu in milli-units, mem in bytes."""

    gpu: int = 0
    cpu: int = 0
    mem: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.gpu + other.gpu, self.cpu + other.cpu, self.mem + other.mem)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.gpu - other.gpu, self.cpu - other.cpu, self.mem - other.mem)

    def fits_in(self, other: Resources) -> bool:
        return self.gpu <= other.gpu and self.cpu <= other.cpu and self.mem <= other.mem

    def describe(self) -> str:
        return f"{format_fgpu(self.gpu)} fGPU, {format_cpu(self.cpu)} CPU, {format_mem(self.mem)}"


# ---------------------------------------------------------------- parsing


def parse_fgpu(value: object, *, field: str = "gpu") -> int:
    """Parse an fGPU amount (``0.5``, ``2``, ``"1.25"``) into milli-fGPU. Zero is allowed."""
    number = _to_decimal(value, field, "an fGPU amount such as 0.5, 1 or 2")
    _check_range(number, field, "fGPU", allow_zero=True, maximum=MAX_FGPU)
    _check_decimals(number, field, "fGPU", FGPU_DECIMALS)
    return int(number * MILLI)


def parse_cpu(value: object, *, field: str = "cpu") -> int:
    """Parse a CPU core count (``1``, ``0.5``, ``"2.25"``) into milli-cores. Must be positive."""
    number = _to_decimal(value, field, "a number of CPU cores such as 0.5, 1 or 4")
    _check_range(number, field, "CPU cores", allow_zero=False, maximum=MAX_CPU)
    _check_decimals(number, field, "CPU cores", CPU_DECIMALS)
    return int(number * MILLI)


def parse_mem(value: object, *, field: str = "mem", minimum: int = 1, bare: int = 1) -> int:
    """Parse a memory size (``512m``, ``2g``, ``2GiB``, ``1.5G``, plain bytes) into bytes.

    Units are binary as in Docker: k = KiB, m = MiB, g = GiB, t = TiB (``GB`` and ``GiB`` alike).
    ``bare``: what a number without a unit counts (bytes; the CLI's ``--gpu-mem`` says MiB,
    as GPU memory is spoken of everywhere).
    """
    bare_unit = "bytes" if bare == 1 else format_mem(bare).removeprefix("1 ")
    allowed = f"a size such as 512m, 2g, 2GiB, 1.5G or a number of {bare_unit}"
    if isinstance(value, bool) or value is None:
        raise ResourceError(field, f"{field}: expected {allowed}, got {value!r}")
    if isinstance(value, int | float | Decimal):
        number = _to_decimal(value, field, allowed)
        multiplier = bare
    elif isinstance(value, str):
        match = _MEM_RE.match(value)
        if not match:
            raise ResourceError(
                field, f"{field}: {value!r} is not a size; write e.g. 512m, 2g or 1.5g "
                f"(a plain number counts {bare_unit})"
            )
        number = Decimal(match["num"])
        unit = match["unit"].lower()
        # "2048b" / "2048 bytes" stays bytes; only a bare number takes the caller's unit
        multiplier = _MEM_UNITS[unit] if unit or value.strip()[-1:].isalpha() else bare
    else:
        raise ResourceError(
            field, f"{field}: expected {allowed}, got {type(value).__name__}"
        )
    if not number.is_finite() or number <= 0:
        raise ResourceError(field, f"{field}: must be a positive size, got {value!r}")
    size = int((number * multiplier).to_integral_value(rounding=ROUND_FLOOR))
    if size > MAX_MEM:
        raise ResourceError(
            field, f"{field}: {value!r} is more than the maximum {format_mem(MAX_MEM)}"
        )
    if size < minimum:
        hint = ""
        if multiplier == 1 and bare == 1:
            hint = " (plain numbers are bytes; did you mean a unit, e.g. 512m?)"
        raise ResourceError(
            field, f"{field}: {value!r} is below the minimum {format_mem(minimum)}{hint}"
        )
    return size


def parse_fgpu_per_gpu(value: object, *, field: str = "fgpu_per_gpu") -> int:
    """Parse the admin's fGPU-per-GPU ratio; returns one device's capacity in milli-fGPU."""
    number = _to_decimal(value, field, "a positive number such as 1, 2 or 4")
    _check_range(number, field, "fGPU per GPU", allow_zero=False, maximum=MAX_FGPU_PER_GPU)
    _check_decimals(number, field, "fGPU per GPU", FGPU_DECIMALS)
    return int(number * MILLI)


def _to_decimal(value: object, field: str, allowed: str) -> Decimal:
    if isinstance(value, bool) or value is None:
        raise ResourceError(field, f"{field}: expected {allowed}, got {value!r}")
    try:
        if isinstance(value, Decimal):
            number = value
        elif isinstance(value, int):
            number = Decimal(value)
        elif isinstance(value, float):
            # the shortest repr: 0.1 -> Decimal("0.1"), not 0.1000000000000000055...
            number = Decimal(repr(value))
        elif isinstance(value, str) and value.strip():
            number = Decimal(value.strip())
        else:
            raise InvalidOperation
    except (InvalidOperation, ValueError):
        raise ResourceError(
            field, f"{field}: {value!r} is not a number; expected {allowed}"
        ) from None
    if not number.is_finite():
        raise ResourceError(
            field, f"{field}: {value!r} is not a finite number; expected {allowed}"
        )
    return number


def _check_range(
    number: Decimal, field: str, unit: str, *, allow_zero: bool, maximum: Decimal
) -> None:
    if number < 0 or (number == 0 and not allow_zero):
        least = "zero or more" if allow_zero else "more than zero"
        raise ResourceError(field, f"{field}: {unit} must be {least}, got {number}")
    if number > maximum:
        raise ResourceError(field, f"{field}: {number} {unit} is more than the maximum {maximum}")


def _check_decimals(number: Decimal, field: str, unit: str, places: int) -> None:
    if number != number.quantize(Decimal(1).scaleb(-places), rounding=ROUND_FLOOR):
        raise ResourceError(
            field, f"{field}: {number} {unit} has more than {places} decimal places"
        )


# ---------------------------------------------------------------- formatting


def format_fgpu(milli: int) -> str:
    """``2000`` -> ``"2.0"``, ``250`` -> ``"0.25"``: at least one decimal, no trailing zeros."""
    return _format_milli(milli)


def format_cpu(milli: int) -> str:
    return _format_milli(milli)


def fgpu_decimal(milli: int) -> Decimal:
    """Milli-fGPU as an exact Decimal with at most 3 decimals (for JSON and APIs)."""
    return (Decimal(milli) / MILLI).normalize() if milli else Decimal(0)


def _format_milli(milli: int) -> str:
    sign = "-" if milli < 0 else ""
    whole, frac = divmod(abs(milli), MILLI)
    digits = f"{frac:03d}".rstrip("0") or "0"
    return f"{sign}{whole}.{digits}"


def format_mem(size: int) -> str:
    """Bytes as a short binary size: ``8 GiB``, ``1.5 GiB``, ``512 MiB``, ``100 B``."""
    for unit, factor in (("PiB", PiB), ("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(size) >= factor:
            value = (Decimal(size) / factor).quantize(Decimal("0.01"), rounding=ROUND_FLOOR)
            return f"{value.normalize():f} {unit}"
    return f"{size} B"


# ---------------------------------------------------------------- slice math


def slice_fraction(gpu_milli: int, device_capacity_milli: int) -> Decimal:
    """The share of a device a slice is: 250 of 2000 milli -> ``0.125``, 1000 of 3000 -> 0.3333.

    Four decimals rounded down (fGPU has two decimals and fGPU per GPU is at most 100, so every
    share that can be written exactly in four decimals is), never more than the slice holds.
    The one definition: the API, the agent wire, ``allocation.json`` and the hook all show it.
    """
    if device_capacity_milli <= 0:
        raise ValueError("device capacity must be positive")
    share = (Decimal(gpu_milli) / device_capacity_milli).quantize(FRACTION_STEP, ROUND_FLOOR)
    return share.normalize() if share else Decimal(0)


def sm_percent(gpu_milli: int, device_capacity_milli: int) -> int:
    """A slice's compute share in whole percent: rounded down, but at least 1 for any slice."""
    if gpu_milli <= 0:
        return 0
    return max(1, slice_share(100, gpu_milli, device_capacity_milli))


def slice_share(amount: int, gpu_milli: int, device_capacity_milli: int) -> int:
    """The part of a device quantity (bytes, SMs) a slice of ``gpu_milli`` gets, rounded down.

    ``device_capacity_milli`` is one whole device in milli-fGPU (``fgpu_per_gpu * 1000``).
    """
    if device_capacity_milli <= 0:
        raise ValueError("device capacity must be positive")
    return amount * gpu_milli // device_capacity_milli


def gpu_for_memory(
    memory: int, device_mem: int, device_capacity_milli: int, step_milli: int
) -> int | None:
    """The smallest slice (milli-fGPU) of a device whose memory is at least ``memory`` bytes.

    Slices are multiples of ``step_milli`` (the cluster's fGPU step), or the whole device when
    no multiple below it is enough; the memory of a slice is :func:`slice_share` of the
    device's (rounded down), so the answer ``g`` is the least with ``device_mem * g //
    capacity >= memory``. ``None`` when even the whole device has less memory than that.
    Exact integers throughout: 2 GiB of an 8 GiB device with 2 fGPU per GPU is 500 (0.5 fGPU).
    """
    if memory <= 0 or device_mem <= 0 or device_capacity_milli <= 0 or step_milli <= 0:
        raise ValueError("memory, device memory, capacity and step must be positive")
    if device_mem < memory:
        return None
    # floor(device_mem * g / cap) >= memory  <=>  device_mem * g >= memory * cap
    least = -(-memory * device_capacity_milli // device_mem)
    stepped = -(-least // step_milli) * step_milli
    return min(stepped, device_capacity_milli)
