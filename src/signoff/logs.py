"""Logging: one line per event, JSON in production, readable in development.

Our modules log through the standard library (``logging.getLogger(__name__)``); structlog's
formatter renders those records and uvicorn's alike, so an operator's log pipeline sees a
single format. Secrets never reach the log: API keys, webhook secrets, passwords and
callback headers are not passed to any log call.
"""

from __future__ import annotations

import logging
import logging.config
from typing import Any

import structlog

from signoff.config import Settings


def configure_logging(settings: Settings) -> None:
    shared: list[Any] = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if settings.is_production
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {
                "signoff": {
                    "()": structlog.stdlib.ProcessorFormatter,
                    "processors": [
                        structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                        structlog.processors.format_exc_info,
                        renderer,
                    ],
                    "foreign_pre_chain": shared,
                }
            },
            "handlers": {
                "stderr": {
                    "class": "logging.StreamHandler",
                    "formatter": "signoff",
                    "stream": "ext://sys.stderr",
                }
            },
            "root": {"handlers": ["stderr"], "level": settings.log_level.upper()},
            "loggers": {
                "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
                "uvicorn.error": {"level": "INFO"},
                "uvicorn.access": {"handlers": [], "propagate": False},
                # One line per callback attempt would drown everything else; the delivery
                # log in the database has them all.
                "httpx": {"level": "WARNING"},
                "httpcore": {"level": "WARNING"},
            },
        }
    )
