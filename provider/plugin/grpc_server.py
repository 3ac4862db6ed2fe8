"""The grpcio server carrying the provider and go-plugin's services."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc

from provider.plugin.services import register_services

MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # grpcio's 4 MiB default is too small for large states


def build_grpc_server(
    provider: object, *, on_shutdown: Callable[[], None], stopping: threading.Event, max_workers: int
) -> grpc.Server:
    """An unstarted server; threads are created on demand, so a large `max_workers` costs nothing idle."""
    server = grpc.server(
        ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rpc"),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )
    register_services(server, provider, on_shutdown=on_shutdown, stopping=stopping)
    return server
