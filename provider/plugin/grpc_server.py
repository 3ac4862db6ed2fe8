"""The grpc.aio server carrying the provider and go-plugin's services, on one event loop thread.

The loop is the TLS terminator's when there is one (provider.plugin.tls_terminator), so an RPC's bytes
are decrypted, dispatched and answered without crossing a Python thread; RPCs that may wait run in a
worker thread (`AsyncProviderServicer`). Callers live in other threads and use the functions below.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc

from provider.plugin.services import AsyncProviderServicer, register_services

MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # grpcio's 4 MiB default is too small for large states


def start_loop_thread(name: str = "plugin-loop") -> asyncio.AbstractEventLoop:
    """A new event loop running in a daemon thread (where no TLS terminator provides one)."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name=name, daemon=True).start()
    return loop


def start_grpc_server(
    provider: object,
    address: str,
    *,
    loop: asyncio.AbstractEventLoop,
    on_shutdown: Callable[[], None],
    max_workers: int,
    credentials: grpc.ServerCredentials | None = None,
) -> grpc.aio.Server:
    """Build and start the server on `loop` (running in another thread); returns once it listens.

    `provider` is the provider server, or an `AsyncProviderServicer` to attach one to later. Worker
    threads are created on demand, so a large `max_workers` costs nothing idle.
    """

    async def start() -> grpc.aio.Server:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        servicer = provider if isinstance(provider, AsyncProviderServicer) else AsyncProviderServicer(
            provider, ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rpc")
        )
        register_services(server, servicer, on_shutdown=on_shutdown)
        if credentials is None:
            server.add_insecure_port(address)
        else:
            server.add_secure_port(address, credentials)
        await server.start()
        return server

    return asyncio.run_coroutine_threadsafe(start(), loop).result()


def stop_grpc_server(server: grpc.aio.Server, loop: asyncio.AbstractEventLoop) -> None:
    """Stop at once (open streams are cancelled); from another thread than the loop's."""
    asyncio.run_coroutine_threadsafe(server.stop(0), loop).result()
