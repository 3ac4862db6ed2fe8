"""httpx client for the gpucloud backend API: retries, idempotency keys, typed errors, waiters.

Knows nothing of Terraform; the provider's resources turn its errors into diagnostics.
"""

from provider.client.client import DEFAULT_ENDPOINT, GpuCloudClient, new_idempotency_key
from provider.client.errors import (
    TLS_VERIFICATION_FAILED,
    ApiError,
    BadRequest,
    ClientError,
    Conflict,
    Forbidden,
    InsufficientCapacity,
    NotFound,
    PreconditionFailed,
    RateLimited,
    ServerError,
    TransportError,
    Unauthorized,
    ValidationFailed,
    WaitCancelled,
    WaitError,
    WaitFailed,
    WaitTimeout,
)
from provider.client.http import ApiResponse, Cancelled
from provider.client.waiter import wait_for

__all__ = [
    "DEFAULT_ENDPOINT",
    "TLS_VERIFICATION_FAILED",
    "ApiError",
    "ApiResponse",
    "BadRequest",
    "Cancelled",
    "ClientError",
    "Conflict",
    "Forbidden",
    "GpuCloudClient",
    "InsufficientCapacity",
    "NotFound",
    "PreconditionFailed",
    "RateLimited",
    "ServerError",
    "TransportError",
    "Unauthorized",
    "ValidationFailed",
    "WaitCancelled",
    "WaitError",
    "WaitFailed",
    "WaitTimeout",
    "new_idempotency_key",
    "wait_for",
]
