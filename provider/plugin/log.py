"""Provider logs as hclog JSON lines on stderr, so Terraform folds them into TF_LOG output.

go-plugin reads each stderr line of the plugin; a JSON object with `@level`, `@message`, `@timestamp`
and `@module` is re-logged by Terraform at that level, other keys become key=value pairs. Everything
in the provider logs through the stdlib `logging` module (the framework included, which knows nothing
of this format); this module installs the one handler. Stdout is never used: it carries the handshake.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from collections.abc import Mapping
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


def hclog_level(levelno: int) -> str:
    if levelno >= logging.ERROR:
        return "error"
    for threshold in (logging.WARNING, logging.INFO, logging.DEBUG, TRACE):
        if levelno >= threshold:
            return _HCLOG_LEVELS[threshold]
    return "trace"


def level_from_environment(environ: Mapping[str, str]) -> int:
    """TF_LOG_PROVIDER wins over TF_LOG; an unrecognised non-empty value means trace, as in Terraform."""
    value = (environ.get("TF_LOG_PROVIDER") or environ.get("TF_LOG") or "").strip().upper()
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
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = "".join(traceback.format_exception(*record.exc_info))
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(environ: Mapping[str, str], stream: IO[str] | None = None) -> None:
    """Route every logger to one hclog JSON handler on stderr at the TF_LOG_PROVIDER/TF_LOG level."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(HclogJsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    level = level_from_environment(environ)
    root.setLevel(level)
    # httpx logs every request at INFO and httpcore every socket step at DEBUG; the client logs each
    # request once at DEBUG itself. Theirs show only at TRACE, so INFO (progress, phase changes) and
    # DEBUG stay readable during long waits.
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(level if level <= TRACE else max(level, logging.WARNING))
    logging.captureWarnings(True)
