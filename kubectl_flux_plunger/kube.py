"""Every call flux-plunger makes to the Kubernetes API goes through this module.

It uses the official client only for what it does well — reading kubeconfig / in-cluster
config, TLS, auth and token refresh — and sends each request itself with an explicit
Content-Type (the client's content-type guessing has regressed before), so that request
counting, timeouts, dry-run and a later client swap live in one file.

The ``kubernetes`` package is imported lazily: ``--help`` must not pay for it.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, TypedDict
from urllib.parse import quote, urlencode

from . import constants as C
from . import servers
from .objects import Obj

if TYPE_CHECKING:
    import urllib3
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; annotations only

JSON = "application/json"
READ_VERBS = frozenset({"GET", "LIST"})
READ_RETRIES = 3  # extra attempts of a read answered 429/5xx
MAX_RETRY_AFTER = 10.0  # seconds; a longer Retry-After is capped
# the apiserver's text for a JSON patch that failed to apply (a failed ``test`` op among them)
GENERIC_422 = "the server rejected our request due to an error in our request"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # JSON is valid YAML; the apiserver accepts it


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


class ConfigError(Exception):
    """The kubeconfig or in-cluster configuration cannot be used."""


# The annotation of the BOOKMARK that ends a watch-list's initial events.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def hr_path(namespace: str | None = None, name: str | None = None) -> str:
    base = f"/apis/{C.HR_GROUP}/{C.HR_VERSION}"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{C.HR_PLURAL}"
    if name:
        base += f"/{quote(name, safe='')}"
    return base


def core_path(resource: str, namespace: str | None = None, name: str | None = None) -> str:
    base = "/api/v1"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{resource}"
    if name:
        base += f"/{quote(name, safe='')}"
    return base


def lease_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
    return base + (f"/{quote(name, safe='')}" if name else "")


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


class ClientConfiguration(Protocol):
    """The part of ``kubernetes.client.Configuration`` (an untyped class) this module reads
    and sets."""

    host: str
    api_key: dict[str, str]
    api_key_prefix: dict[str, str]
    refresh_api_key_hook: Callable[[Any], None] | None
    ssl_ca_cert: str | None
    cert_file: str | None
    key_file: str | None
    tls_server_name: str | None
    verify_ssl: bool
    connection_pool_maxsize: int | None

    def auth_settings(self) -> dict[str, dict[str, Any]]: ...


def _client_modules() -> tuple[ModuleType, ModuleType, ModuleType]:
    """``(configuration module, config package, rest module)`` of the official client,
    without running ``kubernetes/__init__`` and ``kubernetes/client/__init__``, which import
    every API class and model (~0.5 s and ~36 MiB we never use: requests are sent here).

    Light package modules stand in for those two packages; the first access to any other
    attribute runs the real ``__init__`` inside the stand-in, so other code importing the
    client keeps working unchanged."""
    import importlib
    import importlib.util
    import sys
    import types

    def stand_in(name: str, lazy: dict[str, Callable[[], object]]) -> ModuleType:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or spec.submodule_search_locations is None:
            # not installed (or not a regular package): say so, as the real import would
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        origin = spec.origin
        mod = types.ModuleType(name)
        mod.__path__ = list(spec.submodule_search_locations)
        mod.__file__ = origin
        mod.__package__ = name
        state = {"loaded": False}

        def __getattr__(attr: str) -> object:  # noqa: N807 - the stand-in's module __getattr__
            if attr in lazy:
                return lazy[attr]()
            if not attr.startswith("__") and importlib.util.find_spec(f"{name}.{attr}"):
                return importlib.import_module(f"{name}.{attr}")  # a submodule
            if not state["loaded"] and (
                not attr.startswith("__") or attr in ("__version__", "__all__")
            ):
                state["loaded"] = True
                # the loader's code object, not the source file: a frozen build (PyInstaller)
                # ships none, and a source loader reuses its cached bytecode
                get_code = getattr(spec.loader, "get_code", None)
                if get_code is not None:
                    code = get_code(name)
                else:
                    with open(origin) as fh:
                        code = compile(fh.read(), origin, "exec")
                exec(code, mod.__dict__)
                if attr in mod.__dict__:
                    return mod.__dict__[attr]
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")

        mod.__dict__["__getattr__"] = __getattr__  # what `mod.__getattr__ = ...` would do
        sys.modules[name] = mod
        return mod

    if "kubernetes" not in sys.modules:
        root = stand_in("kubernetes", {})

        def api_client() -> Callable[..., object]:
            # kube_config imports ApiClient by name but only calls it in helpers we never
            # use: hand it a factory that loads the real (heavy) class on first call
            def ApiClient(*args: object, **kwargs: object) -> object:  # noqa: N802 - the class
                return importlib.import_module("kubernetes.client").ApiClient(*args, **kwargs)

            return ApiClient

        def configuration_class() -> object:
            return importlib.import_module("kubernetes.client.configuration").Configuration

        root.__dict__["client"] = stand_in(  # i.e. root.client = ..., as the import would
            "kubernetes.client", {"ApiClient": api_client, "Configuration": configuration_class}
        )
    configuration = importlib.import_module("kubernetes.client.configuration")
    config = importlib.import_module("kubernetes.config")
    rest = importlib.import_module("kubernetes.client.rest")
    return configuration, config, rest


@dataclass(frozen=True)
class Overrides:
    """kubectl's connection flags, applied over the kubeconfig (or standing alone)."""

    server: str | None = None
    token: str | None = None
    user: str | None = None
    cluster: str | None = None
    certificate_authority: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None
    tls_server_name: str | None = None
    insecure_skip_tls_verify: bool = False
    impersonate: str | None = None
    impersonate_groups: tuple[str, ...] = ()
    impersonate_uid: str | None = None


def kubeconfig_paths(kubeconfig: str | None) -> list[str]:
    """The files kubectl would read, in order: --kubeconfig, else $KUBECONFIG's entries,
    else ~/.kube/config."""
    import os

    if kubeconfig:
        return [kubeconfig]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [p for p in env.split(os.pathsep) if p]
    return [os.path.expanduser("~/.kube/config")]


def _no_configuration(paths: list[str]) -> ConfigError:
    import os

    if os.environ.get("KUBECONFIG"):
        looked = (
            f"the file in KUBECONFIG does not exist ({paths[0]})"
            if len(paths) == 1
            else f"none of the files in KUBECONFIG exists ({', '.join(paths)})"
        )
    else:
        looked = f"KUBECONFIG is not set, {paths[0]} does not exist"
    return ConfigError(
        f"no configuration has been provided: {looked}, and this is not a pod "
        "(KUBERNETES_SERVICE_HOST is not set); point at a cluster with --kubeconfig FILE, "
        "KUBECONFIG=FILE or --server URL"
    )


def _load_client_configuration(
    kubeconfig: str | None, context: str | None, overrides: Overrides | None = None
) -> ClientConfiguration:
    """A ``kubernetes.client.Configuration`` from kubeconfig (or in-cluster), with
    kubectl's override flags applied."""
    import os

    configuration, config, _ = _client_modules()
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import _get_kube_config_loader

    o = overrides or Overrides()
    cfg: ClientConfiguration = configuration.Configuration()
    paths = kubeconfig_paths(kubeconfig)
    existing = [p for p in paths if os.path.exists(p)]
    try:
        if existing:
            loader = _get_kube_config_loader(
                filename=os.pathsep.join(existing), active_context=context, persist_config=False
            )
            if o.user is not None:
                users = loader._config["users"] if loader._config.safe_get("users") else None
                user = users.get_with_name(o.user, safe=True) if users else None
                if user is None:
                    raise ConfigError(f'auth info "{o.user}" does not exist')
                loader._user = user["user"]
            if o.cluster is not None:
                clusters = (
                    loader._config["clusters"] if loader._config.safe_get("clusters") else None
                )
                cluster = clusters.get_with_name(o.cluster, safe=True) if clusters else None
                if cluster is None:
                    raise ConfigError(f'cluster "{o.cluster}" does not exist')
                loader._cluster = cluster["cluster"]
            loader.load_and_set(cfg)
        elif o.server:
            cfg.host = o.server  # like kubectl: --server alone, no kubeconfig at all
        elif context or o.user or o.cluster:
            raise _no_configuration(paths)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
        else:
            raise _no_configuration(paths)
    except ConfigError:
        raise
    except ConfigException as exc:
        text = " ".join(str(exc).split())
        # the client names the list after the file it read: "... in /path/config/contexts list"
        m = re.search(r"Expected object with name (\S+) in (?:.*/)?contexts list", text)
        if m:
            raise ConfigError(f'context "{m.group(1)}" does not exist') from None
        raise ConfigError(text) from None
    except FileNotFoundError as exc:
        if exc.filename is None:  # e.g. no writable temporary directory for certificate data
            raise ConfigError(" ".join(str(exc).split())) from None
        raise ConfigError(f"kubeconfig not found: {exc.filename}") from None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        # malformed YAML / missing keys surface as these from the loader
        raise ConfigError(
            f"invalid kubeconfig: {' '.join(str(exc).split()) or type(exc).__name__}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - yaml errors and others: one line, no traceback
        raise ConfigError(f"invalid kubeconfig: {' '.join(str(exc).split())[:300]}") from None
    if o.server:
        cfg.host = o.server.rstrip("/")
    if o.token is not None:
        cfg.api_key = {"authorization": f"Bearer {o.token}"}
        cfg.api_key_prefix = {}
        cfg.refresh_api_key_hook = None
    if o.certificate_authority:
        cfg.ssl_ca_cert = o.certificate_authority
    if o.client_certificate:
        cfg.cert_file = o.client_certificate
    if o.client_key:
        cfg.key_file = o.client_key
    if o.tls_server_name:
        cfg.tls_server_name = o.tls_server_name
    if o.insecure_skip_tls_verify:
        cfg.verify_ssl = False
    return cfg


class KubeOptions(TypedDict, total=False):
    """The keyword arguments of :class:`Kube` (what ``from_kubeconfig`` passes through)."""

    request_timeout: float | None
    dry_run: bool
    user_agent: str | None
    impersonate: str | None
    impersonate_groups: tuple[str, ...]
    impersonate_uid: str | None


class Kube:
    """A small, counted, thread-safe Kubernetes API client.

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
        # the server answers watch-lists (sendInitialEvents; WatchList, on by default
        # since Kubernetes 1.34); cleared on the first 400/422 to one.  A refusal is
        # remembered per server for a while (servers.py): loaded here, saved on the flip.
        self._server_file = servers.server_file(
            str(configuration.host), servers.read_ca(getattr(configuration, "ssl_ca_cert", None))
        )
        self._watch_list = not servers.watch_lists_refused(self._server_file)
        self.watch_list_misses = 0  # watch-lists in a row that gave no state
        self.stats = Stats()
        self.before_request: Callable[[str, str], object] | None = None
        from . import __version__

        self._ua = user_agent or f"kubectl-flux-plunger/{__version__}"
        self._impersonate = [("Impersonate-User", impersonate)] if impersonate else []
        self._impersonate += [("Impersonate-Group", g) for g in impersonate_groups]
        if impersonate_uid:
            self._impersonate.append(("Impersonate-Uid", impersonate_uid))

    @classmethod
    def from_kubeconfig(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        overrides: Overrides | None = None,
        **kwargs: Unpack[KubeOptions],
    ) -> Kube:
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

    @property
    def watch_list(self) -> bool:
        """Whether to read with a watch-list; False once this server refused one (now, or
        in a run less than ``servers.TTL`` ago)."""
        return self._watch_list

    @watch_list.setter
    def watch_list(self, value: bool) -> None:
        flipped = self._watch_list and not value
        self._watch_list = value
        if flipped:
            servers.remember_watch_lists_refused(self._server_file, str(self._cfg.host))

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

    # -- transport -----------------------------------------------------------------

    def _headers(self, content_type: str | None) -> MutableMapping[str, str]:
        import urllib3

        headers = urllib3.HTTPHeaderDict({"Accept": JSON, "User-Agent": self._ua})
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
        subclass naming the status) for any non-2xx answer or transport failure.

        Reads (GET, LIST) answered 429 or 5xx are retried a bounded number of times,
        honouring ``Retry-After``; writes never are (a write's caller re-reads and
        re-decides)."""
        attempt = 0
        while True:
            try:
                body_json: Obj = self._send(
                    verb,
                    method,
                    path,
                    query=query,
                    body=body,
                    content_type=content_type,
                    write=write,
                    timeout=timeout,
                    stream=False,
                )
                return body_json
            except (TooManyRequests, ServerError) as exc:
                if verb not in READ_VERBS or attempt >= READ_RETRIES:
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
            "WATCH",
            "GET",
            path,
            query=query,
            body=None,
            content_type=None,
            write=False,
            timeout=timeout,
            stream=True,
        )
        return resp

    def _send(
        self,
        verb: str,
        method: str,
        path: str,
        *,
        query: Obj | None,
        body: Any,
        content_type: str | None,
        write: bool,
        timeout: float | None,
        stream: bool,
    ) -> Any:
        import urllib3  # comes with the client

        q = {k: v for k, v in (query or {}).items() if v is not None}
        if write and self.dry_run:
            q["dryRun"] = "All"
        url = self._cfg.host + path + (("?" + urlencode(q, doseq=True)) if q else "")
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        if self.before_request:
            self.before_request(verb, path)
        self.stats.add(verb)
        t = timeout if timeout is not None else self.request_timeout
        try:
            resp = self._pool.request(
                method,
                url,
                body=data,
                headers=self._headers(content_type),
                preload_content=not stream,
                timeout=urllib3.Timeout(connect=t or 30, read=t)
                if (t or not stream)
                else urllib3.Timeout(connect=30, read=None),
                retries=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise Unreachable(
                0,
                "Unreachable",
                f"cannot reach the Kubernetes API at {self._cfg.host}: {_one_line(exc)}",
            ) from None
        if stream:
            if resp.status >= 300:
                raw = resp.read()
                resp.release_conn()
                raise _error_from(resp.status, raw, resp.headers.get("Retry-After"))
            return resp
        if resp.status >= 300:
            raise _error_from(resp.status, resp.data, resp.headers.get("Retry-After"))
        if not resp.data:
            return {}
        try:
            return json.loads(resp.data)
        except ValueError:
            raise KubeError(
                resp.status,
                "BadResponse",
                f"the API at {self._cfg.host} answered {method} {path} with non-JSON",
            ) from None

    # -- HelmReleases --------------------------------------------------------------

    def get_hr(self, namespace: str, name: str) -> Obj | None:
        """A fresh read; None when the release does not exist."""
        try:
            return self.request("GET", "GET", hr_path(namespace, name))
        except KubeError as exc:
            if exc.object_missing:
                return None
            raise

    def list_hrs(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> list[Obj]:
        """Every HelmRelease of a fresh (paged) LIST."""
        return [hr for items, _ in self.iter_hr_pages(namespace, label_selector) for hr in items]

    def iter_hr_pages(
        self, namespace: str | None = None, label_selector: str | None = None, limit: int = 500
    ) -> Iterator[tuple[list[Obj], str]]:
        """The pages of a fresh LIST, one at a time (``serve`` never holds every release in
        memory at once). Yields (items of one page, list resourceVersion)."""
        cont = None
        while True:
            out = self.request(
                "LIST",
                "GET",
                hr_path(namespace),
                query={"labelSelector": label_selector, "limit": limit, "continue": cont},
            )
            md = out.get("metadata") or {}
            yield out.get("items") or [], md.get("resourceVersion", "")
            cont = md.get("continue")
            if not cont:
                return

    def watch_hrs(
        self,
        namespace: str | None,
        label_selector: str | None,
        resource_version: str,
        timeout_seconds: int = 300,
        field_selector: str | None = None,
        opened: Callable[[Any], None] | None = None,
        send_initial_events: bool = False,
    ) -> Iterator[Obj]:
        """Stream watch events (dicts with ``type`` and ``object``) with bookmarks.
        A 410 arrives as an ERROR event or as a KubeError(status=410).  ``opened`` gets the
        streaming response once the apiserver answered (another thread may shut it down).

        ``send_initial_events`` (``resource_version`` must be ""): a watch-list — the stream
        starts with the current state (a consistent read, as fresh as a GET) as ADDED
        events, ends it with a BOOKMARK annotated :data:`INITIAL_EVENTS_END`, then carries
        every change: one request where a GET and a WATCH would be two.  Servers without
        the WatchList feature answer 422."""
        query: Obj = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "resourceVersion": resource_version or None,
            "timeoutSeconds": timeout_seconds,
        }
        if send_initial_events:
            query["sendInitialEvents"] = "true"
            query["resourceVersionMatch"] = "NotOlderThan"
        resp = self.open_watch(hr_path(namespace), query, timeout=timeout_seconds + 30)
        if opened is not None:
            opened(resp)
        buf = bytearray()
        try:
            for chunk in resp.stream(65536, decode_content=True):
                # one growing buffer; each complete line is cut off its front once (a long
                # object split over many chunks is scanned only from where the last scan
                # stopped, never re-copied per chunk)
                scanned = len(buf)
                buf += chunk
                start = 0
                nl = buf.find(b"\n", scanned)
                while nl >= 0:
                    line = bytes(buf[start:nl])
                    start = nl + 1
                    if line.strip():
                        yield json.loads(line)
                    nl = buf.find(b"\n", start)
                if start:
                    del buf[:start]
        except Exception as exc:
            import urllib3

            if isinstance(exc, (urllib3.exceptions.HTTPError, OSError)):
                raise Unreachable(
                    0, "Unreachable", f"watch interrupted: {_one_line(exc)}"
                ) from None
            raise
        finally:
            resp.release_conn()

    def apply_hr(self, body: Obj, *, force: bool = False) -> Obj:
        """Server-side apply by manager ``flux-plunger`` of a minimal body."""
        md = body["metadata"]
        return self.request(
            "APPLY",
            "PATCH",
            hr_path(md["namespace"], md["name"]),
            body=body,
            content_type=APPLY_PATCH,
            write=True,
            query={"fieldManager": C.FIELD_MANAGER, "force": "true" if force else None},
        )

    def merge_patch_hr(
        self, namespace: str, name: str, patch: Obj, *, field_manager: str = C.CLIENT_SIDE_MANAGER
    ) -> Obj:
        return self.request(
            "PATCH",
            "PATCH",
            hr_path(namespace, name),
            body=patch,
            content_type=MERGE_PATCH,
            write=True,
            query={"fieldManager": field_manager},
        )

    def json_patch_hr(
        self, namespace: str, name: str, ops: list[Obj], *, field_manager: str = C.FIELD_MANAGER
    ) -> Obj:
        return self.request(
            "PATCH",
            "PATCH",
            hr_path(namespace, name),
            body=ops,
            content_type=JSON_PATCH,
            write=True,
            query={"fieldManager": field_manager},
        )

    # -- Helm storage Secrets -------------------------------------------------------

    def list_secrets(self, namespace: str, label_selector: str) -> list[Obj]:
        out = self.request(
            "LIST", "GET", core_path("secrets", namespace), query={"labelSelector": label_selector}
        )
        return out.get("items") or []

    def delete_secret(
        self, namespace: str, name: str, uid: str, resource_version: str | None = None
    ) -> Obj:
        """DELETE with uid and resourceVersion preconditions: a Secret re-created under the
        same name stays, and so does one rewritten in place (Helm updates release Secrets
        keeping their uid) since it was judged.  A failed precondition answers 409.

        The apiserver reads a DELETE's options from the body when there is one and then
        ignores the query, so dry-run must travel in the body too."""
        preconditions = {"uid": uid}
        if resource_version:
            preconditions["resourceVersion"] = resource_version
        options: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": preconditions,
        }
        if self.dry_run:
            options["dryRun"] = ["All"]
        return self.request(
            "DELETE",
            "DELETE",
            core_path("secrets", namespace, name),
            body=options,
            content_type=JSON,
            write=True,
        )

    # -- Events --------------------------------------------------------------------

    def _get_or_none(self, path: str) -> Obj | None:
        """A GET; None when the answer is 404."""
        try:
            return self.request("GET", "GET", path)
        except KubeError as exc:
            if exc.not_found:
                return None
            raise

    def get_event(self, namespace: str, name: str) -> Obj | None:
        return self._get_or_none(core_path("events", namespace, name))

    def iter_events(
        self, namespace: str | None, field_selector: str, limit: int = 500
    ) -> Iterator[Obj]:
        """The Events ``field_selector`` selects, in ``namespace`` (every namespace when
        None), one page at a time: a single request unless more than ``limit`` match."""
        cont = None
        while True:
            out = self.request(
                "LIST",
                "GET",
                core_path("events", namespace),
                query={"fieldSelector": field_selector, "limit": limit, "continue": cont},
            )
            yield from out.get("items") or []
            cont = (out.get("metadata") or {}).get("continue")
            if not cont:
                return

    def create_event(self, namespace: str, body: Obj) -> Obj:
        return self.request(
            "CREATE",
            "POST",
            core_path("events", namespace),
            body=body,
            content_type=JSON,
            write=True,
        )

    def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        return self.request(
            "PATCH",
            "PATCH",
            core_path("events", namespace, name),
            body=patch,
            content_type=MERGE_PATCH,
            write=True,
        )

    # -- Leases --------------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        return self._get_or_none(lease_path(namespace, name))

    def list_leases(self, namespace: str) -> list[Obj]:
        items = self.request("LIST", "GET", lease_path(namespace)).get("items") or []
        return [i for i in items if isinstance(i, dict)]

    def create_lease(self, namespace: str, body: Obj) -> Obj:
        return self.request("CREATE", "POST", lease_path(namespace), body=body, content_type=JSON)

    def update_lease(self, namespace: str, name: str, body: Obj) -> Obj:
        return self.request(
            "UPDATE", "PUT", lease_path(namespace, name), body=body, content_type=JSON
        )

    # -- the controller's Deployment (release-fence --stop-deployment) --------------

    def get_deployment(self, namespace: str, name: str) -> Obj | None:
        return self._get_or_none(
            f"/apis/apps/v1/namespaces/{quote(namespace, safe='')}"
            f"/deployments/{quote(name, safe='')}"
        )

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> Obj:
        """Merge patch of the scale subresource (what `kubectl scale` sends)."""
        return self.request(
            "PATCH",
            "PATCH",
            f"/apis/apps/v1/namespaces/{quote(namespace, safe='')}"
            f"/deployments/{quote(name, safe='')}/scale",
            body={"spec": {"replicas": replicas}},
            content_type=MERGE_PATCH,
            write=True,
        )

    def list_pods(self, namespace: str, label_selector: str) -> list[Obj]:
        out = self.request(
            "LIST", "GET", core_path("pods", namespace), query={"labelSelector": label_selector}
        )
        return out.get("items") or []

    # -- discovery -----------------------------------------------------------------

    def server_version(self) -> Obj:
        return self.request("GET", "GET", "/version")

    def list_deployments_any(self, label_selector: str) -> list[Obj]:
        out = self.request(
            "LIST", "GET", "/apis/apps/v1/deployments", query={"labelSelector": label_selector}
        )
        return out.get("items") or []

    def hr_api_served(self) -> bool:
        try:
            self.request("GET", "GET", f"/apis/{C.HR_GROUP}/{C.HR_VERSION}")
            return True
        except KubeError as exc:
            if exc.not_found:
                return False
            raise


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


IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def context_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    """The namespace of the kubeconfig context in use; None when there is none (or no
    kubeconfig).  An unknown ``context`` is a :class:`ConfigError`."""
    _, config, _ = _client_modules()
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    except Exception:  # noqa: BLE001 - no usable kubeconfig: no namespace from it
        return None
    chosen = active
    if context:
        chosen = next((c for c in contexts if c.get("name") == context), None)
        if chosen is None:
            raise ConfigError(f'context "{context}" does not exist')
    return ((chosen or {}).get("context") or {}).get("namespace") or None


def in_cluster_namespace() -> str | None:
    """The namespace of the pod we run in, when we run in one."""
    try:
        with open(IN_CLUSTER_NAMESPACE) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """kubectl's default: the context's namespace, else the pod's, else ``default``."""
    return context_namespace(kubeconfig, context) or in_cluster_namespace() or "default"
