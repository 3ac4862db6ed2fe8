"""What the conformance provider's `configure` hands to its resources."""

from __future__ import annotations

from dataclasses import dataclass

from acceptance.conformance.store import Store


@dataclass(frozen=True)
class ConformanceData:
    store: Store
    token: str | None
