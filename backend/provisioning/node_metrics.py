"""GPU metrics per node over time: a ring buffer of packed samples in `node_metric_chunks`, the
collector that fills it from the driver's telemetry, and the downsampled read behind
`GET /v1/clusters/{id}/metrics`.

Three tiers: 10-second samples for 70 minutes (windows 5m, 15m, 1h), 1-minute means for 7 hours (6h)
and 5-minute means for 30 hours (1d). A tier is a ring of chunks of 60 samples (one row each: 5 bytes a
sample, GPU utilisation % as one byte and GPU memory used MiB as four); a chunk is overwritten when the
ring comes round to it, so a node's storage is fixed (23 rows, about 7 KB) and needs no retention job,
on SQLite and PostgreSQL alike. A read takes the chunks of the window in one query and averages the
samples into at most ~300 buckets per series.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import struct
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.domain.lifecycle import NodeStage
from backend.provisioning import node_health
from backend.provisioning.driver import NodeTelemetry, ProvisioningDriver, TelemetryTarget, telemetry_of
from backend.provisioning.state import aware
from backend.store.engine_models import EngineNode, NodeMetricChunk
from backend.store.models import Cluster

SAMPLES_PER_CHUNK = 60
_SAMPLE = struct.Struct("<BI")  # utilisation % (255: none), memory used MiB (0xFFFFFFFF: none)
_NO_UTIL, _NO_MEMORY = 255, 0xFFFFFFFF
_EMPTY_CHUNK = _SAMPLE.pack(_NO_UTIL, _NO_MEMORY) * SAMPLES_PER_CHUNK
_MEMORIES = struct.Struct("<" + "xI" * SAMPLES_PER_CHUNK)  # every memory value of a chunk at once
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


# 10 s for 70 minutes, 1 min for 7 hours, 5 min for 30 hours; each coarser tier holds means of the
# finer one's samples.
FINE, MINUTE, COARSE = Tier(0, 10, 8), Tier(1, 60, 8), Tier(2, 300, 7)
TIERS = (FINE, MINUTE, COARSE)
WINDOWS = {"5m": (300, FINE), "15m": (900, FINE), "1h": (3600, FINE), "6h": (21_600, MINUTE),
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
        if row.started_at != start:
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
    """Store samples of one node: each in the 10-second ring; in each coarser ring the mean of what the
    finer ring holds of its interval (else of the samples given, for intervals the finer ring no longer
    holds: a bulk load of old samples)."""
    if not samples:
        return
    chunks = _Chunks(session, cluster_id, node_name)
    chunks.load({(t.number, (_index(t, s.at) // SAMPLES_PER_CHUNK) % t.ring) for s in samples for t in TIERS})
    for sample in samples:
        index = _index(FINE, sample.at)
        data = chunks.chunk(FINE, index // SAMPLES_PER_CHUNK)
        _SAMPLE.pack_into(data, (index % SAMPLES_PER_CHUNK) * _SAMPLE.size,
                          *_SAMPLE.unpack(_pack(sample.gpu_utilization_pct, sample.gpu_memory_used_mib)))
    for finer, tier in itertools.pairwise(TIERS):
        ratio = tier.step_seconds // finer.step_seconds
        newest = max(_index(finer, s.at) for s in samples) // SAMPLES_PER_CHUNK
        given: dict[int, list[Sample]] = defaultdict(list)
        for sample in samples:
            given[_index(tier, sample.at)].append(sample)
        for index, own in given.items():
            first = index * ratio
            if newest - first // SAMPLES_PER_CHUNK < finer.ring:  # the finer ring still holds it
                held = chunks.chunk(finer, first // SAMPLES_PER_CHUNK)
                values = [_unpack(held, (first + k) % SAMPLES_PER_CHUNK) for k in range(ratio)]
            else:
                values = [(None if s.gpu_utilization_pct is None else round(s.gpu_utilization_pct),
                           s.gpu_memory_used_mib) for s in own]
            utils = [u for u, _ in values if u is not None]
            memories = [m for _, m in values if m is not None]
            data = chunks.chunk(tier, index // SAMPLES_PER_CHUNK)
            _SAMPLE.pack_into(data, (index % SAMPLES_PER_CHUNK) * _SAMPLE.size, *_SAMPLE.unpack(_pack(
                sum(utils) / len(utils) if utils else None,
                round(sum(memories) / len(memories)) if memories else None)))
    chunks.flush()


@dataclass(frozen=True)
class NodeReading:
    """One RUNNING node's telemetry, read by the driver, for `store`."""

    node_id: str
    reading: NodeTelemetry


def read(session: Session, driver: ProvisioningDriver, now: dt.datetime) -> list[NodeReading]:
    """The driver's telemetry of every RUNNING node of every cluster (over SSH on real nodes: `session`
    should be a read session, holding no write lock while the nodes answer)."""
    source = telemetry_of(driver)
    if source is None:
        return []
    rows = session.execute(
        select(EngineNode, Cluster.name).join(Cluster, Cluster.id == EngineNode.cluster_id)
        .where(EngineNode.active_name.is_not(None), EngineNode.stage == str(NodeStage.READY))).all()
    targets = [TelemetryTarget(cluster_name=cluster_name, node_name=node.name, instance_id=node.id,
                               attempt=node.attempt, instance_type=node.instance_type,
                               gpu_count=node.gpu_count, watch_token=node.watch_token,
                               created_at=node.created_at) for node, cluster_name in rows]
    readings = source.nodes_telemetry(session, targets, now) if targets else []
    return [NodeReading(node.id, reading) for (node, _), reading in zip(rows, readings, strict=True)]


def store(session: Session, readings: Sequence[NodeReading], now: dt.datetime) -> int:
    """Record a sample of each node read and each node's degraded reason from the same reading (a node
    gone since it was read is skipped); the nodes read."""
    nodes = {node.id: node for node in session.scalars(
        select(EngineNode).where(EngineNode.id.in_([r.node_id for r in readings])))} if readings else {}
    kept = [(nodes[r.node_id], r.reading) for r in readings if r.node_id in nodes]
    for node, reading in kept:
        record(session, node.cluster_id, node.name, [sample_of(reading.gpus, now)])
    # The same readings say which nodes are degraded: recorded for the reconciler (repair) and reads.
    node_health.record_degraded(session, [node for node, _ in kept], [reading for _, reading in kept], now)
    return len(readings)


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
    per_bucket = step // tier.step_seconds  # buckets are aligned to chunks: each holds whole groups
    for name, started_at, data in session.execute(query):
        acc = sums.setdefault(name, [[0.0] * buckets, [0.0] * buckets, [0.0] * buckets, [0.0] * buckets])
        first_bucket = int(aware(started_at).timestamp()) // step - first  # type: ignore[union-attr]
        utils, memories = bytes(data[0::_SAMPLE.size]), _MEMORIES.unpack(data)
        complete = _NO_UTIL not in utils and _NO_MEMORY not in memories  # the usual case: plain sums
        groups = range(max(0, -first_bucket), min(SAMPLES_PER_CHUNK // per_bucket, buckets - first_bucket))
        for group in groups:
            bucket, start = first_bucket + group, group * per_bucket
            if complete:
                util_sum, util_n = sum(utils[start:start + per_bucket]), per_bucket
                memory_sum, memory_n = sum(memories[start:start + per_bucket]), per_bucket
            else:
                present = [u for u in utils[start:start + per_bucket] if u != _NO_UTIL]
                used = [m for m in memories[start:start + per_bucket] if m != _NO_MEMORY]
                util_sum, util_n, memory_sum, memory_n = sum(present), len(present), sum(used), len(used)
            acc[0][bucket] += util_sum
            acc[1][bucket] += util_n
            acc[2][bucket] += memory_sum
            acc[3][bucket] += memory_n

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
