"""The official Kubernetes client, loaded lazily and only in part.

flux-plunger uses it only for what it does well — reading kubeconfig / in-cluster config,
TLS, auth and token refresh; requests are sent by :mod:`.transport`.  ``--help`` must not
pay for it: nothing here imports ``kubernetes`` until called."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol


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


def kubeconfig_contexts(kubeconfig: str | None) -> list[dict[str, Any]]:
    """The contexts of ``kubeconfig`` (kubectl's default files when None) as the official
    client lists them (each a dict with its ``name``): what the completion of ``--context``
    offers.  Raises whatever the client raises when there is no usable kubeconfig."""
    _, config, _ = _client_modules()
    contexts: list[dict[str, Any]]
    contexts, _active = config.list_kube_config_contexts(config_file=kubeconfig)
    return contexts
