"""Prometheus metrics of the API, in a registry per app (tests build many apps in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

# Label values must come from a fixed set: a method invented by a client is one more time series
# held forever. Routes are labelled by their template ("unmatched" for unknown paths), never the path.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "other"


class Metrics:
    """Request counters and latency histograms labelled by method, route template and status."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "gpucloud_http_requests",
            "HTTP requests handled",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gpucloud_http_request_duration_seconds",
            "HTTP request latency",
            ["method", "route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )

    def observe(self, *, method: str, route: str, status: int, seconds: float) -> None:
        """Count one finished request (methods outside KNOWN_METHODS count as "other")."""
        method = method if method in KNOWN_METHODS else OTHER_METHOD
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
