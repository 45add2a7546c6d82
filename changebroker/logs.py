"""Structured log lines (logfmt) that people can read and machines can parse.

Every line carries the service name and, inside a request, the request's
X-Flow-Id, so one flow can be followed across the changeserver, the broker,
the registry and the bridge::

    ts=2026-11-22T14:03:11.201Z level=info service=broker flow_id=4f1c msg="published" count=100
"""

from __future__ import annotations

import logging
import re
import sys
from contextvars import ContextVar
from typing import Any

from changebroker.controls import CLASS, CODES
from changebroker.timestamps import utc_second

flow_id: ContextVar[str | None] = ContextVar("flow_id", default=None)

_service = "changebroker"


def fields(**values: Any) -> dict[str, Any]:
    """``log.info("published", extra=fields(count=3))`` adds ``count=3`` to the line."""
    return {"fields": values}


# A value with a space, '=', a quote or a control character is quoted, its backslashes, quotes
# and control characters escaped as in a JSON string (\n, \r, \t, else \uXXXX; also DEL, C1
# and U+2028/2029, which JSON would leave raw): whatever a request carries, a line stays one
# line that a terminal shows as written, and json.loads reads a quoted value back.
_NEEDS_QUOTES = re.compile(f'[ ="{CLASS}]')
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPES = {
    ord("\\"): "\\\\",
    ord('"'): '\\"',
    **{code: _SHORT_ESCAPES.get(chr(code), f"\\u{code:04x}") for code in CODES},
}


def _quote(value: Any) -> str:
    text = str(value)
    if text == "" or _NEEDS_QUOTES.search(text):
        return '"' + text.translate(_ESCAPES) + '"'
    return text


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = utc_second(int(record.created))
        parts = [
            f"ts={ts}.{int(record.msecs):03d}Z",
            f"level={record.levelname.lower()}",
            f"service={_service}",
            f"logger={record.name}",
        ]
        current_flow = flow_id.get()
        if current_flow:
            parts.append(f"flow_id={_quote(current_flow)}")
        parts.append(f"msg={_quote(record.getMessage())}")
        for key, value in getattr(record, "fields", {}).items():
            parts.append(f"{key}={_quote(value)}")
        if record.exc_info:
            parts.append(f"exc={_quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


class _Stderr(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is at each record, not as it was at configuration: a
    process that swaps it (a test runner capturing each test's output, an embedding app)
    would otherwise have every later line written to a stream it has closed."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # StreamHandler.__init__ sets it; the property above is the stream


def configure(service: str, level: str = "INFO") -> None:
    """Send every logger's records, as logfmt lines, to stderr."""
    global _service
    _service = service
    handler = _Stderr()
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Our middleware writes one access line per request, with the flow id.
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # httpx logs every request it makes at INFO (one line per long poll of the bridge, per
    # call of the demo and the console); callers log their own failures.
    logging.getLogger("httpx").setLevel(logging.WARNING)
