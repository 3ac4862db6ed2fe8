"""structlog configuration: JSON lines on stdout, one per request plus domain events."""

from __future__ import annotations

import logging

import structlog


def configure_logging(level: str = "info") -> None:
    """Render every structlog event as one JSON line with an ISO timestamp and level."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.WriteLoggerFactory(),  # sys.stdout as it is at write time
        cache_logger_on_first_use=False,
    )
