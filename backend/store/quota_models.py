"""Per-project quotas (migration 0015_quotas): the most GPUs, clusters and hourly spend a project may
hold, set by the cloud's operator (`gpucloud-backend set-quota`). A null limit is no limit; a project
without a row has none. Money is integer micro-dollars, as everywhere in the store."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from backend.store.base import Base, UtcDateTime


class ProjectQuota(Base):
    __tablename__ = "project_quotas"

    project_id: Mapped[str] = mapped_column(
        String(30), ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    max_gpus: Mapped[int | None] = mapped_column(Integer)
    max_clusters: Mapped[int | None] = mapped_column(Integer)
    max_hourly_micros: Mapped[int | None] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
