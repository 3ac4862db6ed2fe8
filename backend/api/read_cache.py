"""The latest answer of GET /v1/clusters/{id} per cluster, with the database change stamp read before
it (backend/store/change_stamps.py): filled by the route, served by backend/api/cluster_reads.py."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterRead:
    """One answer of GET /v1/clusters/{id}, with what decides who may see it and whether it is current."""

    stamp: str
    project_id: str
    labels: Mapping[str, str] | None
    body: bytes
    etag: str


class ClusterReads:
    """The latest answer per cluster, at most `max_entries` (the least recently stored go first)."""

    def __init__(self, max_entries: int) -> None:
        self._entries: OrderedDict[str, ClusterRead] = OrderedDict()
        self._max_entries = max_entries
        self._lock = threading.Lock()  # on PostgreSQL the route stores from the read pool's threads

    def get(self, cluster_id: str) -> ClusterRead | None:
        return self._entries.get(cluster_id)

    def put(self, cluster_id: str, read: ClusterRead) -> None:
        with self._lock:
            self._entries.pop(cluster_id, None)
            self._entries[cluster_id] = read
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
