"""The conformance provider's "remote API": objects in a JSON file, safe across threads and processes."""

from __future__ import annotations

import contextlib
import fcntl
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from provider.cty import CtyType, decode_json, encode_json

_lock = threading.Lock()


class Store:
    def __init__(self, path: Path) -> None:
        self.path = path

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, dict[str, str]]]:
        with _lock, open(self.path.with_suffix(".lock"), "a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            data = json.loads(self.path.read_text()) if self.path.exists() else {}
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(data, sort_keys=True, indent=1))
                tmp.replace(self.path)

    def get(self, kind: str, object_id: str, t: CtyType) -> Any:
        with self._locked() as data:
            raw = data.get(kind, {}).get(object_id)
        return None if raw is None else decode_json(raw, t)

    def all(self, kind: str, t: CtyType) -> list[Any]:
        """Every object of `kind`, in creation order (ids end in a counter)."""
        with self._locked() as data:
            raw = dict(data.get(kind, {}))
        ordered = sorted(raw.items(), key=lambda item: int(item[0].rsplit("-", 1)[-1]))
        return [decode_json(value, t) for _, value in ordered]

    def put(self, kind: str, object_id: str, value: Any, t: CtyType) -> None:
        with self._locked() as data:
            data.setdefault(kind, {})[object_id] = encode_json(value, t).decode()

    def delete(self, kind: str, object_id: str) -> None:
        with self._locked() as data:
            data.get(kind, {}).pop(object_id, None)

    def next_id(self, kind: str) -> str:
        with self._locked() as data:
            counters = data.setdefault("_counters", {})
            number = int(counters.get(kind, "0")) + 1
            counters[kind] = str(number)
            return f"{kind}-{number}"
