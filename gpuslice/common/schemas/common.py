"""Building blocks used by several schema modules.

Resource amounts: clients send numbers or strings (``0.5``, ``"2g"``); the input types parse them
with ``gpuslice.common.resources`` into exact integers (milli-fGPU, milli-cores, bytes) and write
them back in user units when a client serializes to JSON, so a model round-trips. Answers carry
fGPU and cores as decimals in user units (JSON numbers) and memory as bytes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, Field, PlainSerializer, model_validator

from gpuslice.common.limits import DEFAULT_CPU, DEFAULT_GPU, DEFAULT_MEM, MIN_MEM
from gpuslice.common.resources import (
    ResourceError,
    Resources,
    fgpu_decimal,
    format_mem,
    parse_cpu,
    parse_fgpu,
    parse_mem,
)

T = TypeVar("T")


def _parser(parse: Callable[..., int], field: str) -> BeforeValidator:
    def validate(value: object) -> int:
        try:
            return parse(value, field=field)
        except ResourceError as exc:
            raise ValueError(exc.message) from None

    return BeforeValidator(validate)


def _milli_to_number(value: int) -> float:
    # Milli-units have at most 3 decimals, so the float's shortest repr parses back exactly.
    return float(fgpu_decimal(value))


_AS_NUMBER = PlainSerializer(_milli_to_number, return_type=float, when_used="json")

FgpuIn = Annotated[int, _parser(parse_fgpu, "gpu"), _AS_NUMBER]
CpuIn = Annotated[int, _parser(parse_cpu, "cpu"), _AS_NUMBER]
MemIn = Annotated[int, _parser(parse_mem, "mem")]
# A session's memory: Docker refuses a container with less than MIN_MEM.
SessionMemIn = Annotated[int, _parser(functools.partial(parse_mem, minimum=MIN_MEM), "mem")]

# Output: exact decimals in user units, JSON numbers.
Number = Annotated[Decimal, PlainSerializer(float, return_type=float, when_used="json")]


class ResourcesIn(BaseModel):
    """Resources a client asks for: ``gpu`` in fGPU, ``cpu`` in cores, ``mem`` as a size."""

    gpu: FgpuIn = Field(default=DEFAULT_GPU, validate_default=True,
                        description="fGPU, e.g. 0.5 or 2; 0 for a CPU-only session.")
    cpu: CpuIn = Field(default=DEFAULT_CPU, validate_default=True,
                       description=f"CPU cores, e.g. 0.5 or 4 (default {DEFAULT_CPU}).")
    mem: SessionMemIn = Field(
        default=DEFAULT_MEM, validate_default=True,
        description=f"Memory, e.g. 512m or 2g (default {DEFAULT_MEM}; at least "
        f"{format_mem(MIN_MEM)}).",
    )
    gpu_mem: MemIn | None = Field(
        default=None,
        description="Instead of `gpu`: the GPU memory the job needs, e.g. 2048m. The scheduler "
        "gives it the smallest slice (in the cluster's fGPU step) of the GPU it chooses whose "
        "memory is at least that.",
    )

    @model_validator(mode="after")
    def _one_way_to_ask(self) -> ResourcesIn:
        if self.gpu_mem is not None and self.gpu:
            raise ValueError("ask for a GPU share (fGPU) or GPU memory, not both")
        return self

    def to_resources(self) -> Resources:
        return Resources(self.gpu, self.cpu, self.mem)


class ResourcesPublic(BaseModel):
    """An amount of resources: ``gpu`` in fGPU, ``cpu`` in cores, ``mem`` in bytes;
    ``gpu_mem`` when the session asked by GPU memory (``gpu`` is then its slice once placed)."""

    gpu: Number
    cpu: Number
    mem: int
    gpu_mem: int | None = None

    @classmethod
    def of(cls, gpu: int, cpu: int, mem: int, gpu_mem: int | None = None) -> ResourcesPublic:
        """From exact integers (milli-fGPU, milli-cores, bytes)."""
        return cls(gpu=fgpu_decimal(gpu), cpu=fgpu_decimal(cpu), mem=mem, gpu_mem=gpu_mem)


class ExactResources(BaseModel):
    """Resources as exact integers, the unit of the agent wire: ``gpu`` in milli-fGPU, ``cpu``
    in milli-cores, ``mem`` in bytes."""

    gpu: int = Field(ge=0)
    cpu: int = Field(ge=0)
    mem: int = Field(ge=0)

    def to_resources(self) -> Resources:
        return Resources(self.gpu, self.cpu, self.mem)


class Page(BaseModel, Generic[T]):
    """One page of a listing, newest first."""

    items: list[T]
    total: int = Field(description="Number of items matching the filters, all pages together.")
    limit: int
    offset: int
    next: str | None = Field(
        default=None,
        description="Where the next page begins (give it as `after`), or null on the last page. "
        "Paging with it costs the same on page 1 and page 1,000, and an item created meanwhile "
        "does not push one already seen onto the next page.",
    )
