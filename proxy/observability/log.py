"""structlog set-up: one JSON object per line on stderr (or a console renderer for humans)."""

from __future__ import annotations

import logging
import sys
import weakref

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    renderer = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


# The loggers get_logger made (modules make theirs at import), for assemble_loggers.
_made: weakref.WeakSet[object] = weakref.WeakSet()
_assembled = False


def get_logger(name: str = "sluice") -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)  # the configured wrapper class
    if _assembled:
        logger.bind()
    else:
        _made.add(logger)
    return logger


def assemble_loggers() -> None:
    """Assemble every logger now, configured, where structlog would on each one's first line and keep it.

    Assembled at its first line, a logger whose first line comes during a spike of connections (a closed
    connection's, the memory return's) keeps a dozen small objects born among the spike's: each pins one
    of the 1 MiB arenas pymalloc would otherwise free after the spike (docs/architecture.md). Loggers made
    later are assembled as they are made."""
    global _assembled
    _assembled = True
    for logger in list(_made):
        logger.bind()  # type: ignore[attr-defined]  # the lazy proxy's; it keeps what it assembled
    _made.clear()
