"""GPU metrics per node over time: a ring buffer of packed samples in `node_metric_chunks`, the
collector that fills it from the driver's telemetry, and the downsampled read behind
`GET /v1/clusters/{id}/metrics`.

Two tiers: 10-second samples for 70 minutes (windows 5m, 15m, 1h) and 1-minute means for 25 hours
(6h, 1d). A tier is a ring of chunks of 60 samples (one row each: 5 bytes a sample, GPU utilisation %
as one byte and GPU memory used MiB as four); a chunk is overwritten when the ring comes round to it,
so a node's storage is fixed (32 rows, about 10 KB) and needs no retention job, on SQLite and
PostgreSQL alike. A read takes the chunks of the window in one query and averages the samples into at
most ~300 buckets per series.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.domain.lifecycle import NodeStage
from backend.provisioning.driver import TelemetryTarget, telemetry_of
from backend.provisioning.state import aware
from backend.store.engine_models import EngineNode, NodeMetricChunk
from backend.store.models import Cluster

SAMPLES_PER_CHUNK = 60
_SAMPLE = struct.Struct("<BI")  # utilisation % (255: none), memory used MiB (0xFFFFFFFF: none)
_NO_UTIL, _NO_MEMORY = 255, 0xFFFFFFFF
_EMPTY_CHUNK = _SAMPLE.pack(_NO_UTIL, _NO_MEMORY) * SAMPLES_PER_CHUNK
MAX_POINTS = 300


@dataclass(frozen=True)
class Tier:
    number: int
    step_seconds: int
    ring: int  # chunks kept

    @property
    def chunk_seconds(self) -> int:
        return self.step_seconds * SAMPLES_PER_CHUNK

    @property
    def retention(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.chunk_seconds * (self.ring - 1))


FINE, COARSE = Tier(0, 10, 8), Tier(1, 60, 26)  # 70 minutes of 10 s, 25 hours of 1 min
WINDOWS = {"5m": (300, FINE), "15m": (900, FINE), "1h": (3600, FINE), "6h": (21_600, COARSE),
           "1d": (86_400, COARSE)}


@dataclass(frozen=True)
class Sample:
    at: dt.datetime
    gpu_utilization_pct: float | None  # mean over the node's GPUs
    gpu_memory_used_mib: int | None  # sum over the node's GPUs


def _pack(util: float | None, memory: int | None) -> bytes:
    return _SAMPLE.pack(_NO_UTIL if util is None else max(0, min(100, round(util))),
                        _NO_MEMORY if memory is None else max(0, min(_NO_MEMORY - 1, memory)))


def _unpack(data: bytes | bytearray, position: int) -> tuple[int | None, int | None]:
    util, memory = _SAMPLE.unpack_from(data, position * _SAMPLE.size)
    return (None if util == _NO_UTIL else util), (None if memory == _NO_MEMORY else memory)


class _Chunks:
    """The chunks a write touches, loaded once (locked on PostgreSQL) and written back together."""

    def __init__(self, session: Session, cluster_id: str, node_name: str) -> None:
        self.session, self.cluster_id, self.node_name = session, cluster_id, node_name
        self.rows: dict[tuple[int, int], NodeMetricChunk] = {}
        self.data: dict[tuple[int, int], bytearray] = {}

    def load(self, keys: Iterable[tuple[int, int]]) -> None:
        wanted = {key for key in keys if key not in self.rows}
        if not wanted:
            return
        query = select(NodeMetricChunk).where(
            NodeMetricChunk.cluster_id == self.cluster_id, NodeMetricChunk.node_name == self.node_name,
            NodeMetricChunk.tier.in_({t for t, _ in wanted}),
            NodeMetricChunk.slot.in_({s for _, s in wanted})).with_for_update()
        for row in self.session.scalars(query):
            self.rows[(row.tier, row.slot)] = row

    def chunk(self, tier: Tier, chunk_number: int) -> bytearray:
        """The buffer of chunk `chunk_number`, emptied when its ring slot held an older chunk."""
        key = (tier.number, chunk_number % tier.ring)
        start = dt.datetime.fromtimestamp(chunk_number * tier.chunk_seconds, dt.UTC)
        row = self.rows.get(key)
        if row is None:
            row = NodeMetricChunk(cluster_id=self.cluster_id, node_name=self.node_name, tier=tier.number,
                                  slot=key[1], started_at=start, data=_EMPTY_CHUNK)
            self.session.add(row)
            self.rows[key] = row
        if aware(row.started_at) != start:
            row.started_at, row.data = start, _EMPTY_CHUNK
            self.data.pop(key, None)
        if key not in self.data:
            self.data[key] = bytearray(row.data)
        return self.data[key]

    def flush(self) -> None:
        for key, data in self.data.items():
            self.rows[key].data = bytes(data)


def _index(tier: Tier, at: dt.datetime) -> int:
    return int(at.timestamp() // tier.step_seconds)


def record(session: Session, cluster_id: str, node_name: str, samples: Sequence[Sample]) -> None:
    """Store samples of one node: each in the 10-second ring, and the mean of its minute (what the
    10-second ring holds of that minute, else the samples given) in the 1-minute ring."""
    chunks = _Chunks(session, cluster_id, node_name)
    chunks.load({(t.number, (_index(t, s.at) // SAMPLES_PER_CHUNK) % t.ring) for s in samples
                 for t in (FINE, COARSE)})
    minutes: dict[int, list[Sample]] = defaultdict(list)
    for sample in samples:
        index = _index(FINE, sample.at)
        data = chunks.chunk(FINE, index // SAMPLES_PER_CHUNK)
        _SAMPLE.pack_into(data, (index % SAMPLES_PER_CHUNK) * _SAMPLE.size,
                          *_SAMPLE.unpack(_pack(sample.gpu_utilization_pct, sample.gpu_memory_used_mib)))
        minutes[_index(COARSE, sample.at)].append(sample)
    newest_fine = max((_index(FINE, s.at) for s in samples), default=0) // SAMPLES_PER_CHUNK
    for minute, given in minutes.items():
        first_fine = minute * COARSE.step_seconds // FINE.step_seconds
        if newest_fine - first_fine // SAMPLES_PER_CHUNK < FINE.ring:  # the minute is in the fine ring
            fine = chunks.chunk(FINE, first_fine // SAMPLES_PER_CHUNK)
            values = [_unpack(fine, (first_fine + k) % SAMPLES_PER_CHUNK)
                      for k in range(COARSE.step_seconds // FINE.step_seconds)]
        else:
            values = [(None if s.gpu_utilization_pct is None else round(s.gpu_utilization_pct),
                       s.gpu_memory_used_mib) for s in given]
        utils = [u for u, _ in values if u is not None]
        memories = [m for _, m in values if m is not None]
        data = chunks.chunk(COARSE, minute // SAMPLES_PER_CHUNK)
        _SAMPLE.pack_into(data, (minute % SAMPLES_PER_CHUNK) * _SAMPLE.size, *_SAMPLE.unpack(_pack(
            sum(utils) / len(utils) if utils else None,
            round(sum(memories) / len(memories)) if memories else None)))
    chunks.flush()


def collect(session: Session, driver: object, now: dt.datetime) -> int:
    """One sample of every RUNNING node of every cluster from the driver's telemetry; the nodes read."""
    source = telemetry_of(driver)
    if source is None:
        return 0
    rows = session.execute(
        select(EngineNode, Cluster.name).join(Cluster, Cluster.id == EngineNode.cluster_id)
        .where(EngineNode.active_name.is_not(None), EngineNode.stage == str(NodeStage.READY))).all()
    for node, cluster_name in rows:
        target = TelemetryTarget(cluster_name=cluster_name, node_name=node.name, instance_id=node.id,
                                 attempt=node.attempt, instance_type=node.instance_type,
                                 gpu_count=node.gpu_count, watch_token=node.watch_token,
                                 created_at=node.created_at)
        gpus = source.node_telemetry(session, target, now).gpus
        record(session, node.cluster_id, node.name, [sample_of(gpus, now)])
    return len(rows)


def sample_of(gpus: Sequence[Any] | None, at: dt.datetime) -> Sample:
    """A node's sample from its GPU readings: mean utilisation, total memory used (None: no reading)."""
    utils = [g.utilization_pct for g in gpus or () if g.utilization_pct is not None]
    memories = [g.memory_used_mib for g in gpus or () if g.memory_used_mib is not None]
    return Sample(at, sum(utils) / len(utils) if utils else None, sum(memories) if memories else None)


def series(session: Session, cluster_id: str, window: str, now: dt.datetime, node_name: str | None = None
           ) -> dict[str, Any]:
    """Per node, GPU utilisation and memory over `window`, in at most ~MAX_POINTS buckets (columns share
    one `timestamps` list; a bucket without samples is null)."""
    seconds, tier = WINDOWS[window]
    samples = seconds // tier.step_seconds
    step = tier.step_seconds * math.ceil(samples / MAX_POINTS)
    last = int(now.timestamp() // step)
    first = last - seconds // step + 1
    query = select(NodeMetricChunk.node_name, NodeMetricChunk.started_at, NodeMetricChunk.data).where(
        NodeMetricChunk.cluster_id == cluster_id, NodeMetricChunk.tier == tier.number,
        NodeMetricChunk.started_at > now - dt.timedelta(seconds=seconds + tier.chunk_seconds))
    if node_name is not None:
        query = query.where(NodeMetricChunk.node_name == node_name)
    sums: dict[str, list[list[float]]] = {}
    buckets = last - first + 1
    for name, started_at, data in session.execute(query):
        acc = sums.setdefault(name, [[0.0] * buckets, [0.0] * buckets, [0.0] * buckets, [0.0] * buckets])
        base = int(aware(started_at).timestamp())  # type: ignore[union-attr]
        for position in range(SAMPLES_PER_CHUNK):
            bucket = (base + position * tier.step_seconds) // step - first
            if not 0 <= bucket < buckets:
                continue
            util, memory = _unpack(data, position)
            if util is not None:
                acc[0][bucket] += util
                acc[1][bucket] += 1
            if memory is not None:
                acc[2][bucket] += memory
                acc[3][bucket] += 1
    def stamp(bucket: int) -> str:
        return dt.datetime.fromtimestamp((first + bucket) * step, dt.UTC).isoformat().replace("+00:00", "Z")

    return {
        "window": window, "step_seconds": step, "timestamps": [stamp(i) for i in range(buckets)],
        "series": [
            {"node": name,
             "gpu_utilization_pct": [round(u / n, 1) if n else None
                                     for u, n in zip(acc[0], acc[1], strict=True)],
             "gpu_memory_used_mib": [round(m / n) if n else None
                                     for m, n in zip(acc[2], acc[3], strict=True)]}
            for name, acc in sorted(sums.items())
        ],
    }
