"""Every call flux-plunger makes to the Kubernetes API goes through this module.

It uses the official client only for what it does well — reading kubeconfig / in-cluster
config, TLS, auth and token refresh — and sends each request itself with an explicit
Content-Type (the client's content-type guessing has regressed before), so that request
counting, timeouts, retries, dry-run and a later client swap live in one file.

The ``kubernetes`` package is imported lazily: ``--help`` must not pay for it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import urlencode

from ..core.objects import Obj
from . import protobuf
from .config import Kubeconfig, Overrides, _load_client_configuration
from .errors import (
    ConfigError,
    KubeError,
    ServerError,
    TooManyRequests,
    Unreachable,
    _error_from,
)
from .official import ClientConfiguration, _client_modules
from .paths import JSON

if TYPE_CHECKING:
    import urllib3
    from typing_extensions import Self, Unpack  # typing's are 3.11+; annotations only

READ_VERBS = frozenset({"GET", "LIST"})
READ_RETRIES = 3  # extra attempts of a read answered 429/5xx
MAX_RETRY_AFTER = 10.0  # seconds; a longer Retry-After is capped


@dataclass
class Stats:
    """Requests sent, by verb (GET, LIST, WATCH, APPLY, PATCH, DELETE, CREATE, UPDATE)."""

    counts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, verb: str) -> None:
        with self.lock:
            self.counts[verb] += 1

    def total(self) -> int:
        with self.lock:
            return sum(self.counts.values())

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return dict(self.counts)


@dataclass(frozen=True)
class Request:
    """One request as :meth:`Transport._send` sends it.  ``verb`` is what it is counted as
    (GET, LIST, WATCH, APPLY, PATCH, DELETE, CREATE, UPDATE), ``method`` the HTTP method;
    ``write`` adds ``dryRun=All`` under dry-run; ``stream`` returns the open response."""

    verb: str
    method: str
    path: str
    query: Obj | None = None
    body: Any = None
    content_type: str | None = None
    write: bool = False
    timeout: float | None = None
    stream: bool = False
    accept: str = JSON


class KubeOptions(TypedDict, total=False):
    """The keyword arguments of :class:`Kube` (what ``from_kubeconfig`` passes through)."""

    request_timeout: float | None
    dry_run: bool
    user_agent: str | None
    impersonate: str | None
    impersonate_groups: tuple[str, ...]
    impersonate_uid: str | None


class Transport:
    """A small, counted, thread-safe connection to one apiserver: TLS and auth from the
    official client's configuration, the request counters, the test hook, retries of reads.

    ``dry_run`` makes every write to a HelmRelease, Secret or Event carry ``dryRun=All``
    (``--dry-run=server``); Lease writes (serve only) are never dry.
    ``before_request`` is a test hook called with (verb, path) before each request.
    """

    def __init__(
        self,
        configuration: ClientConfiguration,
        *,
        request_timeout: float | None = None,
        dry_run: bool = False,
        user_agent: str | None = None,
        impersonate: str | None = None,
        impersonate_groups: tuple[str, ...] = (),
        impersonate_uid: str | None = None,
    ) -> None:
        _, _, rest = _client_modules()

        self._cfg = configuration
        self._pool: urllib3.PoolManager = rest.RESTClientObject(configuration).pool_manager
        self.request_timeout = request_timeout
        self.dry_run = dry_run
        self.stats = Stats()
        self.before_request: Callable[[str, str], object] | None = None
        from .. import __version__

        self._ua = user_agent or f"kubectl-flux-plunger/{__version__}"
        self._impersonate = [("Impersonate-User", impersonate)] if impersonate else []
        self._impersonate += [("Impersonate-Group", g) for g in impersonate_groups]
        if impersonate_uid:
            self._impersonate.append(("Impersonate-Uid", impersonate_uid))

    @classmethod
    def from_kubeconfig(
        cls,
        kubeconfig: str | Kubeconfig | None = None,
        context: str | None = None,
        overrides: Overrides | None = None,
        **kwargs: Unpack[KubeOptions],
    ) -> Self:
        if overrides is not None and overrides.impersonate_groups and not overrides.impersonate:
            raise ConfigError(
                "requesting groups without impersonating a user is not allowed "
                "(--as-group needs --as)"
            )
        if overrides is not None:
            kwargs.setdefault("impersonate", overrides.impersonate)
            kwargs.setdefault("impersonate_groups", overrides.impersonate_groups)
            kwargs.setdefault("impersonate_uid", overrides.impersonate_uid)
        return cls(_load_client_configuration(kubeconfig, context, overrides), **kwargs)

    @property
    def host(self) -> str:
        return self._cfg.host

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._pool.clear()

    def ensure_connections(self, n: int) -> None:
        """Keep up to ``n`` connections to the apiserver open for reuse (one per thread
        sending requests at once).  The client's default is 5 per CPU: beyond it, every
        request over the limit opens a new TLS connection and throws it away afterwards."""
        if n <= (self._cfg.connection_pool_maxsize or 0):
            return
        _, _, rest = _client_modules()
        self._cfg.connection_pool_maxsize = n
        old, self._pool = self._pool, rest.RESTClientObject(self._cfg).pool_manager
        with contextlib.suppress(Exception):
            old.clear()

    def _headers(self, content_type: str | None, accept: str = JSON) -> MutableMapping[str, str]:
        import urllib3

        headers = urllib3.HTTPHeaderDict({"Accept": accept, "User-Agent": self._ua})
        for key, value in self._impersonate:
            headers.add(key, value)
        if content_type:
            headers["Content-Type"] = content_type
        # the configuration refreshes expiring tokens (exec plugins, projected SA tokens)
        bearer = self._cfg.auth_settings().get("BearerToken")
        if bearer and bearer.get("value"):
            headers[bearer["key"]] = bearer["value"]
        return headers

    def request(
        self,
        verb: str,
        method: str,
        path: str,
        *,
        query: Obj | None = None,
        body: Any = None,
        content_type: str | None = None,
        write: bool = False,
        timeout: float | None = None,
    ) -> Obj:
        """Send one request. Returns the decoded JSON body.  Raises :class:`KubeError` (a
        subclass naming the status) for any non-2xx answer or transport failure."""
        return self.send(Request(verb, method, path, query, body, content_type, write, timeout))

    def send(self, req: Request) -> Obj:
        """:meth:`request`, for a :class:`Request` made by the caller (one that asks for
        another answer: ``accept``, e.g. protobuf's ``PartialObjectMetadata``).

        Reads (GET, LIST) answered 429 or 5xx are retried a bounded number of times,
        honouring ``Retry-After``; writes never are (a write's caller re-reads and
        re-decides)."""
        attempt = 0
        while True:
            try:
                body_json: Obj = self._send(req)
                return body_json
            except (TooManyRequests, ServerError) as exc:
                if req.verb not in READ_VERBS or attempt >= READ_RETRIES:
                    raise
                delay = _retry_after(exc, attempt)
                attempt += 1
            time.sleep(delay)

    def open_watch(
        self, path: str, query: Obj, timeout: float | None = None
    ) -> urllib3.BaseHTTPResponse:
        """Send one WATCH and return its streaming response once the apiserver answered
        2xx (a non-2xx answer raises :class:`KubeError`, the connection released).  Never
        retried: a watcher resumes from its last resourceVersion itself."""
        resp: urllib3.BaseHTTPResponse = self._send(
            Request("WATCH", "GET", path, query=query, timeout=timeout, stream=True)
        )
        return resp

    def _send(self, req: Request) -> Any:
        import urllib3  # comes with the client

        q = {k: v for k, v in (req.query or {}).items() if v is not None}
        if req.write and self.dry_run:
            q["dryRun"] = "All"
        url = self._cfg.host + req.path + (("?" + urlencode(q, doseq=True)) if q else "")
        data = None
        if req.body is not None:
            data = req.body if isinstance(req.body, (bytes, str)) else json.dumps(req.body)
        if self.before_request:
            self.before_request(req.verb, req.path)
        self.stats.add(req.verb)
        t = req.timeout if req.timeout is not None else self.request_timeout
        try:
            resp = self._pool.request(
                req.method,
                url,
                body=data,
                headers=self._headers(req.content_type, req.accept),
                preload_content=not req.stream,
                timeout=urllib3.Timeout(connect=t or 30, read=t)
                if (t or not req.stream)
                else urllib3.Timeout(connect=30, read=None),
                retries=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise Unreachable(
                0,
                "Unreachable",
                f"cannot reach the Kubernetes API at {self._cfg.host}: {_one_line(exc)}",
            ) from None
        return self._answer(req, resp)

    def _answer(self, req: Request, resp: urllib3.BaseHTTPResponse) -> Any:
        """The open response of a stream, the decoded body of anything else; a non-2xx
        answer raises (a stream's connection released first)."""
        if req.stream:
            if resp.status >= 300:
                raw = resp.read()
                resp.release_conn()
                raise _error_from(resp.status, raw, resp.headers.get("Retry-After"))
            return resp
        if resp.status >= 300:
            raise _error_from(resp.status, resp.data, resp.headers.get("Retry-After"))
        if not resp.data:
            return {}
        if (resp.headers.get("Content-Type") or "").startswith(protobuf.PROTOBUF):
            try:
                return protobuf.partial_object_metadata(resp.data)
            except (protobuf.Malformed, UnicodeDecodeError) as exc:
                raise KubeError(
                    resp.status,
                    "BadResponse",
                    f"the API at {self._cfg.host} answered {req.method} {req.path} with "
                    f"protobuf flux-plunger cannot read ({exc})",
                ) from None
        try:
            return json.loads(resp.data)
        except ValueError:
            raise KubeError(
                resp.status,
                "BadResponse",
                f"the API at {self._cfg.host} answered {req.method} {req.path} with non-JSON",
            ) from None


def _one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


def _retry_after(exc: KubeError, attempt: int) -> float:
    """Seconds to wait before retrying a read: the server's Retry-After (capped), else an
    exponential backoff from 0.2 s."""
    hint = exc.body.get("_retryAfter")
    try:
        seconds = float(hint) if hint is not None else None
    except (TypeError, ValueError):
        seconds = None
    if seconds is None:
        details = exc.body.get("details")
        value = details.get("retryAfterSeconds") if isinstance(details, dict) else None
        seconds = float(value) if isinstance(value, (int, float)) else None
    if seconds is None:
        seconds = 0.2 * (2**attempt)
    return max(0.0, min(seconds, MAX_RETRY_AFTER))
