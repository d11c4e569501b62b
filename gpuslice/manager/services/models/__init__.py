"""The model store: one interface (``store.ModelStore``) with a local and an S3 backend, and
the index of who saved what (``catalog``). Invariants in README.md beside this file."""

from __future__ import annotations

from gpuslice.manager.services.models.store import ModelStore
from gpuslice.manager.settings import ManagerSettings


def make_store(settings: ManagerSettings) -> ModelStore:
    """The backend the settings name (boto3 is imported only for S3)."""
    if settings.model_store.backend == "s3":
        from gpuslice.manager.services.models.s3 import S3Store

        return S3Store(settings.model_store)
    from gpuslice.manager.services.models.local import LocalStore

    return LocalStore(settings.model_dir)
