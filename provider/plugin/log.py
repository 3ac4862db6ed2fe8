"""Provider logs as hclog JSON lines on stderr, so Terraform folds them into TF_LOG output.

go-plugin reads each stderr line of the plugin; a JSON object with `@level`, `@message`, `@timestamp`
and `@module` is re-logged by Terraform at that level, other keys become key=value pairs. Everything
in the provider logs through the stdlib `logging` module (the framework included, which knows nothing
of this format); this module installs the one handler. Stdout is never used: it carries the handshake.

Every line carries the fields terraform-plugin-go writes, so Go-provider log tooling works unchanged:
`tf_provider_addr` always, and while an RPC runs `tf_rpc`, `tf_req_id` (one per request) and the type
it is about (`tf_resource_type`, `tf_data_source_type`, ...). The level comes from
`TF_LOG_PROVIDER_<TYPE>` (`TF_LOG_PROVIDER_GPUCLOUD`), else `TF_LOG_PROVIDER`, else `TF_LOG`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import IO, Any

TRACE = 5
logging.addLevelName(TRACE, "TRACE")

_HCLOG_LEVELS = {TRACE: "trace", logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn"}
_TF_LOG_LEVELS = {
    "TRACE": TRACE,
    "JSON": TRACE,  # TF_LOG=JSON means trace level in JSON format
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "OFF": logging.CRITICAL + 10,
}
_DEFAULT_LEVEL = logging.WARNING  # Terraform discards provider logs unless TF_LOG is set
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
# Fields of every line (the provider address) and of the lines logged while one RPC runs.
_process_fields: dict[str, str] = {}
_request_fields: ContextVar[Mapping[str, Any] | None] = ContextVar("tf_request_fields", default=None)


def hclog_level(levelno: int) -> str:
    if levelno >= logging.ERROR:
        return "error"
    for threshold in (logging.WARNING, logging.INFO, logging.DEBUG, TRACE):
        if levelno >= threshold:
            return _HCLOG_LEVELS[threshold]
    return "trace"


def provider_level_variable(provider_address: str) -> str:
    """`TF_LOG_PROVIDER_<TYPE>` for `registry.terraform.io/NS/TYPE` (dashes as underscores), as
    terraform-plugin-go names it; "" without an address."""
    type_name = provider_address.rstrip("/").rsplit("/", 1)[-1]
    return f"TF_LOG_PROVIDER_{type_name.replace('-', '_').upper()}" if type_name else ""


def level_from_environment(environ: Mapping[str, str], provider_address: str = "") -> int:
    """TF_LOG_PROVIDER_<TYPE> wins over TF_LOG_PROVIDER, which wins over TF_LOG; an unrecognised
    non-empty value means trace, as in Terraform."""
    own = provider_level_variable(provider_address)
    value = (
        (environ.get(own) if own else None) or environ.get("TF_LOG_PROVIDER") or environ.get("TF_LOG") or ""
    ).strip().upper()
    if not value:
        return _DEFAULT_LEVEL
    return _TF_LOG_LEVELS.get(value, TRACE)


class HclogJsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        created = record.created
        entry: dict[str, Any] = {
            "@level": hclog_level(record.levelno),
            "@message": record.getMessage(),
            "@module": record.name,
            "@timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
            + f".{int(created % 1 * 1_000_000):06d}Z",
            **_process_fields,
            **(_request_fields.get() or {}),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = "".join(traceback.format_exception(*record.exc_info))
        return json.dumps(entry, default=str, ensure_ascii=False)


def new_request_id() -> str:
    """A random id in UUID form, as terraform-plugin-go gives each request (without `uuid`: ~1.5 ms)."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@contextlib.contextmanager
def request_fields(rpc: str, **fields: str) -> Iterator[None]:
    """While the block runs (one RPC, in this thread), every line also carries `tf_rpc`, a fresh
    `tf_req_id` and `fields`."""
    token = _request_fields.set({"tf_rpc": rpc, "tf_req_id": new_request_id(), **fields})
    try:
        yield
    finally:
        _request_fields.reset(token)


def configure_logging(
    environ: Mapping[str, str], stream: IO[str] | None = None, *, provider_address: str = ""
) -> None:
    """Route every logger to one hclog JSON handler on stderr at the level the environment asks for
    (see `level_from_environment`); every line names the provider (`tf_provider_addr`)."""
    _process_fields.clear()
    if provider_address:
        _process_fields["tf_provider_addr"] = provider_address
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(HclogJsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    level = level_from_environment(environ, provider_address)
    root.setLevel(level)
    # httpx logs every request at INFO and httpcore every socket step at DEBUG; the client logs each
    # request once at DEBUG itself. Theirs show only at TRACE, so INFO (progress, phase changes) and
    # DEBUG stay readable during long waits.
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(level if level <= TRACE else max(level, logging.WARNING))
    # hpack (under our HTTP/2 server) logs every header block and header at DEBUG: protocol internals,
    # ~10 lines per RPC, never of use in a provider log.
    logging.getLogger("hpack").setLevel(max(level, logging.WARNING))
    logging.captureWarnings(True)
