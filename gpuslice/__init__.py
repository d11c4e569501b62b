"""gpuslice: share GPU servers with fractional-GPU compute sessions."""

__version__ = "0.1.0"
