"""ORM model of uploads' reservations against storage quotas (security review F5). Kept apart
from ``models.py`` (already past its size); imported by it, so the metadata Alembic and the
backups see has it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from gpuslice.manager.db.base import Base, UTCDateTime, utcnow


class UploadReservationRow(Base):
    """Bytes an upload in progress holds against its folder's quota
    (``services/storage/reservations.py``): a file upload's whole declared size, under its
    partial file's name in ``<storage root>/.uploads``; an archive's, as it unpacks. Counted
    as used until the upload finishes (then the folder's size has them) or expires."""

    __tablename__ = "upload_reservations"

    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    folder_id: Mapped[str] = mapped_column(
        ForeignKey("folders.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    size: Mapped[int] = mapped_column(BigInteger)
    touched_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
