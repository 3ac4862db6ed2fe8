"""Debug (reattach) mode: one long-lived plaintext server that Terraform attaches to.

Run `terraform-provider-gpucloud --debug` in one terminal (under a debugger if you like), export the
TF_REATTACH_PROVIDERS value it prints in another, and run terraform there: every terraform command
uses this process instead of launching the provider. Ctrl-C stops it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from collections.abc import Callable

from provider.plugin.handshake import APP_PROTOCOL_VERSION, socket_directory


def reattach_value(provider_address: str, *, pid: int, socket_path: str) -> str:
    """The TF_REATTACH_PROVIDERS JSON for one provider served at `socket_path`."""
    entry = {
        "Protocol": "grpc",
        "ProtocolVersion": APP_PROTOCOL_VERSION,
        "Pid": pid,
        "Test": True,  # Terraform then never tries to stop this process
        "Addr": {"Network": "unix", "String": socket_path},
    }
    return json.dumps({provider_address: entry}, separators=(",", ":"))


class _Stopped(Exception):
    pass


def _stop(_signo: int, _frame: object) -> None:
    raise _Stopped


def serve_debug(make_server: Callable[[], object], *, provider_address: str) -> None:
    from provider.plugin.launch import listen, start_runtime
    from provider.plugin.tls_terminator import TlsTerminator

    directory = socket_directory()
    socket_path = os.path.join(directory, "plugin.sock")
    try:
        # Plaintext, as go-plugin's reattach mode. Shutdown only sets the runtime's event, which
        # nobody waits for: the process outlives the terraform commands that attach to it.
        runtime = start_runtime()
        runtime.serve(make_server, os.environ, provider_address=provider_address)
        terminator = TlsTerminator(listen(socket_path), None)
        terminator.start()
        terminator.serve(runtime.server)
        value = reattach_value(provider_address, pid=os.getpid(), socket_path=socket_path)
        sys.stdout.write(
            "Provider started in debug mode. To attach Terraform, set in the shell you run terraform in:\n\n"
            f"\texport TF_REATTACH_PROVIDERS='{value}'\n\n"
            "Press Ctrl-C to stop the provider.\n"
        )
        sys.stdout.flush()
        # Explicit handlers: a shell starting us in the background would otherwise leave SIGINT ignored.
        # They raise rather than set an event: a handler runs in this thread, maybe inside `Event.wait`
        # holding the event's own lock, and setting that event there would deadlock.
        for signo in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signo, _stop)
        try:
            while True:
                signal.pause()
        except _Stopped:
            pass
    finally:
        shutil.rmtree(directory, ignore_errors=True)
