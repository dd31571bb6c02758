"""What a failed request raises: :class:`KubeError` and the subclass naming its status, and
:class:`ConfigError` for a kubeconfig (or in-cluster configuration) that cannot be used."""

from __future__ import annotations

import json
from typing import TypeVar

from ..core.objects import Obj

E = TypeVar("E", bound=BaseException)

# the apiserver's text for a JSON patch that failed to apply (a failed ``test`` op among them)
GENERIC_422 = "the server rejected our request due to an error in our request"


class KubeError(Exception):
    """A request failed. ``status`` is the HTTP status (0 when no answer came).

    Callers catch the subclass that names what happened (``except Conflict:``); the
    status-code properties stay for code that still asks them."""

    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def forbidden(self) -> bool:
        return self.status == 403

    @property
    def object_missing(self) -> bool:
        """A 404 for a missing object carries details.kind/name; one for a missing API
        (e.g. the CRD is not installed) does not."""
        details = self.body.get("details") or {}
        return self.not_found and bool(details.get("name") or details.get("kind"))

    @property
    def failed_test_op(self) -> bool:
        """A JSON patch whose ``test`` op did not hold (the object changed since our read).
        The apiserver answers it with a bare 422 — its generic "rejected our request" text
        and no details — unlike a validation or admission refusal, which names its cause."""
        details = self.body.get("details") or {}
        return self.status == 422 and not details.get("causes") and self.message == GENERIC_422

    @property
    def changed(self) -> bool:
        """The object changed since the read a write carried (409, a failed JSON-patch
        ``test``): re-read and re-decide."""
        return self.conflict or self.failed_test_op

    @property
    def retryable(self) -> bool:
        """Worth another try on a fresh read: the object changed, or the API was
        unreachable, throttled or failing (0, 429, 5xx).  Anything else (400, 401, 403, a
        404 for the API itself, a 422 validation or admission refusal) cannot change by
        retrying."""
        return self.changed or self.status in (0, 429) or self.status >= 500

    def __str__(self) -> str:
        return self.message


class Unreachable(KubeError):
    """No answer came (connection refused, timeout, broken stream)."""


class BadRequest(KubeError):
    """400."""


class Unauthorized(KubeError):
    """401: the credentials were refused."""


class Forbidden(KubeError):
    """403: RBAC (or an admission plugin) forbids the request."""


class NotFound(KubeError):
    """404: the object — or, without details, the API itself — does not exist."""


class Conflict(KubeError):
    """409: the object changed since our read (resourceVersion/uid precondition), it
    already exists, or a server-side apply met another manager's field."""

    @property
    def field_manager_conflict(self) -> bool:
        """A server-side apply refused because another manager owns a field we set."""
        causes = (self.body.get("details") or {}).get("causes") or []
        return any(
            isinstance(c, dict) and c.get("reason") == "FieldManagerConflict" for c in causes
        )


class Gone(KubeError):
    """410: the resourceVersion is too old (watch/list)."""


class Invalid(KubeError):
    """422: the request is invalid (a failed JSON patch ``test``, an admission denial…)."""


class TooManyRequests(KubeError):
    """429: API priority and fairness (or a webhook) asked us to slow down."""


class ServerError(KubeError):
    """5xx."""


_BY_STATUS: dict[int, type[KubeError]] = {
    0: Unreachable,
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def kube_error(status: int, reason: str, message: str, body: Obj | None = None) -> KubeError:
    """The KubeError subclass for ``status``."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else KubeError)
    return cls(status, reason, message, body)


def kept(exc: E) -> E:
    """``exc`` with its tracebacks (and those of its causes) dropped, for keeping beyond the
    ``except`` that caught it: a traceback holds the frame that caught it, and that frame
    holds whatever keeps the error (``self.error = exc``, a local) — a reference cycle only
    the cyclic collector's rare full collections free.  One per watch that ended in an error
    grew serve's heap between them (issue 49's soak).  Messages, status and type stay."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        cur = todo.pop()
        if cur is not None and id(cur) not in seen:
            seen.add(id(cur))
            cur.__traceback__ = None
            todo += (cur.__cause__, cur.__context__)  # ``raise X from Y`` inside ``except Z``
    return exc


class ConfigError(Exception):
    """The kubeconfig or in-cluster configuration cannot be used."""


def _error_from(status: int, raw: bytes, retry_after: str | None = None) -> KubeError:
    body: Obj = {}
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    reason = body.get("reason") or {
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        409: "Conflict",
        410: "Gone",
    }.get(status, "Error")
    message = body.get("message") or (raw.decode("utf-8", "replace").strip()[:300] if raw else "")
    if retry_after is not None:
        body = {**body, "_retryAfter": retry_after}
    return kube_error(status, reason, " ".join(message.split()) or f"HTTP {status}", body)
