"""structlog, configured once at each process's entry point."""

from __future__ import annotations

import logging
import sys

import structlog

from gapless.escape import printable

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    """Route structlog (and stdlib logging) to stderr as console lines or JSON objects."""
    numeric = _LEVELS.get(level, logging.INFO)
    renderer: structlog.typing.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]
    if fmt != "json":
        # JSON escapes what it must; a console line would carry a value's terminal controls.
        processors.append(_printable_values)
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # One write a line (PrintLogger writes the line and its newline apart: two system calls
        # when stderr is unbuffered, as PYTHONUNBUFFERED=1 makes it in the image).
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr,
                        format="%(levelname)s %(name)s %(message)s")


#: Keys whose text is lines (format_exc_info, StackInfoRenderer).
_MULTILINE = frozenset({"exception", "stack"})


def _printable_values(_logger: object, _method: str,
                      event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    """Every text value of a console log line as terminal-safe text (gapless.escape); a
    traceback keeps its lines."""
    for key, value in event.items():
        if key in _MULTILINE:
            event[key] = "\n".join(printable(line) for line in value.split("\n"))
        elif isinstance(value, str):
            event[key] = printable(value)
    return event


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)  # type: ignore[no-any-return]
