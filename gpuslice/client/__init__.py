"""The gpuslice Python SDK; the CLI is built on it."""

from gpuslice.client.client import ApiError, Client
from gpuslice.client.config import ClientConfig, load_config, save_config

__all__ = ["ApiError", "Client", "ClientConfig", "load_config", "save_config"]
