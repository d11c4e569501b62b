"""What a caller may do with a folder: ``folders.get_access``'s answer, which every operation
on one folder (renaming, sharing, files) takes and checks before it acts."""

from __future__ import annotations

from dataclasses import dataclass

from gpuslice.manager.db.models import FolderRow
from gpuslice.manager.errors import Forbidden


@dataclass(frozen=True, slots=True)
class Access:
    """A folder and what the caller may do with it."""

    folder: FolderRow
    level: str  # owner | rw | ro
    admin: bool = False  # the caller is an admin (who may learn which users exist)
    viewer_id: str = ""  # the caller's user id (whose sessions they may see by name)

    @property
    def writable(self) -> bool:
        return self.level in ("owner", "rw")

    def require_write(self) -> None:
        if not self.writable:
            raise Forbidden(f"folder {self.folder.name} is shared with you read-only",
                            code="read_only")

    def require_owner(self, what: str) -> None:
        if self.level != "owner":
            raise Forbidden(f"only the owner of folder {self.folder.name} may {what}")
