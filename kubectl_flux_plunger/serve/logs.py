"""Structured logs for ``serve``: ``text`` (one readable line with key=value fields) or
``json`` (one JSON object per line: ts, level, msg, logger, plus the fields).

Fields are passed as ``log.info("msg", extra=fields(key=value))``; records from the core
(``%``-formatted messages without fields) come out the same way.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import TextIO

FIELDS = "fp_fields"
LEVELS = ("debug", "info", "warning", "error")


def fields(**kv: object) -> dict[str, dict[str, object]]:
    return {FIELDS: kv}


def _ts(record: logging.LogRecord) -> str:
    t = dt.datetime.fromtimestamp(record.created, dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _level(record: logging.LogRecord) -> str:
    return record.levelname.lower()


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": _ts(record),
            "level": _level(record),
            "msg": record.getMessage(),
            "logger": record.name,
        }
        for k, v in (getattr(record, FIELDS, None) or {}).items():
            if k not in out:
                out[k] = v
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


def _quote(v: object) -> str:
    s = str(v)
    if not s or any(c in s for c in ' "=\n\t'):
        return json.dumps(s)
    return s


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [_ts(record), record.levelname.upper().ljust(7), record.getMessage()]
        kv = getattr(record, FIELDS, None) or {}
        if kv:
            parts.append(" ".join(f"{k}={_quote(v)}" for k, v in kv.items()))
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup(fmt: str = "text", level: str = "info", stream: TextIO | None = None) -> logging.Handler:
    """Configure the root logger once; returns the handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    # the HTTP client libraries are chatty at debug; keep them at warning
    for noisy in ("urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return handler
