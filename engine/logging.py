"""structlog, configured once at the edge (the CLI, a test session, a server).

``INNERGUARD_LOG_FORMAT=json`` (or ``--log-format json``) writes JSON lines for
machines; the default is a readable console renderer for people. Logs go to
stderr so that stdout stays free for results.
"""
from __future__ import annotations

import logging
import os
import sys

import structlog

_configured = False


class _CurrentStderr:
    """``sys.stderr`` as it is when a line is written, not when logging was
    configured: a test runner or a daemon may swap it (and close the old one)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(fmt: str | None = None, level: str | None = None) -> None:
    global _configured
    fmt = fmt or os.environ.get("INNERGUARD_LOG_FORMAT", "console")
    level_name = (level or os.environ.get("INNERGUARD_LOG_LEVEL", "info")).upper()
    renderer = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.dict_tracebacks if fmt == "json" else structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            getattr(logging, level_name, logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(name: str):
    if not _configured:
        configure()
    return structlog.get_logger(name)
