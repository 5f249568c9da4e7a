"""Logging set-up: configured again (each in-process CLI command does) without losing loggers."""

from __future__ import annotations

import logging

import structlog
from structlog.testing import capture_logs

from app.logging import configure_logging


def test_a_logger_used_before_logging_is_configured_again_still_follows_the_configuration() -> None:
    # A module's logger is cached with the processors of its first use: configured again
    # with a new list, it kept the old one, and a later capture (tests) saw none of its lines.
    root = logging.getLogger()
    handlers, level, config = root.handlers[:], root.level, structlog.get_config()
    processors = config["processors"].copy()  # the list itself is kept and changed
    try:
        configure_logging("info", "json")
        log = structlog.get_logger("skilldesk.test.cached")
        log.info("first")  # cached now
        configure_logging("info", "json")
        with capture_logs() as logs:
            log.info("second")
        assert [e["event"] for e in logs] == ["second"]
    finally:
        config["processors"][:] = processors
        structlog.configure(**config)
        root.handlers[:] = handlers
        root.setLevel(level)
