"""The kube package's edges no tier reached: kubeconfig loading and kubectl's override flags, the one
request path (_send) against a fake connection pool — dry-run, bodies, the before-request hook,
non-JSON and empty answers, transport failures, streamed errors — the error taxonomy's
properties and the path helpers.  No cluster, no subprocess."""
from __future__ import annotations

import json

import pytest
import urllib3

from kubectl_flux_plunger import kube as K
from kubectl_flux_plunger.kube import errors as kube_errors
from kubectl_flux_plunger.kube import transport as kube_transport
from kubectl_flux_plunger.kube import config as kube_config
from kubectl_flux_plunger.kube.official import _client_modules

pytestmark = pytest.mark.unit

KUBECONFIG = """\
apiVersion: v1
kind: Config
current-context: t
clusters:
- name: t
  cluster: {server: 'https://127.0.0.1:1'}
- name: other
  cluster: {server: 'https://10.0.0.2:6443'}
users:
- name: u
  user: {token: abc}
- name: v
  user: {token: def}
contexts:
- name: t
  context: {cluster: t, user: u, namespace: team-a}
- name: bare
  context: {cluster: other, user: v}
"""


@pytest.fixture
def kubeconfig(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kc = tmp_path / "kubeconfig"
    kc.write_text(KUBECONFIG)
    return str(kc)


class _Resp:
    def __init__(self, status=200, data=b"", headers=None):
        self.status = status
        self.data = data
        self.headers = headers or {}
        self.released = False

    def read(self):
        return self.data

    def release_conn(self):
        self.released = True


class _Pool:
    """Records each request; answers from a list (an exception is raised)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []
        self.cleared = 0

    def request(self, method, url, **kwargs):
        self.calls.append((method, url, kwargs))
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    def clear(self):
        self.cleared += 1


@pytest.fixture
def kube(kubeconfig):
    k = K.Kube.from_kubeconfig(kubeconfig)
    yield k
    k.close()


def _with_pool(k, *answers):
    pool = _Pool(*answers)
    k._pool = pool
    return pool


# -- kubeconfig and override flags ----------------------------------------------------------

def test_user_and_cluster_overrides_replace_the_contexts(kubeconfig):
    cfg = kube_config._load_client_configuration(
        kubeconfig, None, K.Overrides(user="v", cluster="other"))
    assert cfg.host == "https://10.0.0.2:6443"
    assert cfg.auth_settings()["BearerToken"]["value"] == "Bearer def"


@pytest.mark.parametrize(("overrides", "message"), [
    (K.Overrides(user="nobody"), 'auth info "nobody" does not exist'),
    (K.Overrides(cluster="nowhere"), 'cluster "nowhere" does not exist'),
])
def test_unknown_user_or_cluster_is_a_one_line_config_error(kubeconfig, overrides, message):
    with pytest.raises(K.ConfigError) as err:
        kube_config._load_client_configuration(kubeconfig, None, overrides)
    assert str(err.value) == message


def test_unknown_context_is_named(kubeconfig):
    # the client's text names the list after the file ("... in /tmp/x/kubeconfig/contexts
    # list"): the one-line message must not depend on it
    with pytest.raises(K.ConfigError) as err:
        kube_config._load_client_configuration(kubeconfig, "nope")
    assert str(err.value) == 'context "nope" does not exist'


def test_every_connection_flag_is_applied_over_the_kubeconfig(kubeconfig):
    cfg = kube_config._load_client_configuration(kubeconfig, None, K.Overrides(
        server="https://api.example:6443/", token="tok", certificate_authority="/ca.crt",
        client_certificate="/c.crt", client_key="/c.key", tls_server_name="api.internal",
        insecure_skip_tls_verify=True))
    assert cfg.host == "https://api.example:6443"            # the trailing slash dropped
    assert cfg.auth_settings()["BearerToken"]["value"] == "Bearer tok"
    assert cfg.refresh_api_key_hook is None
    assert (cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file) == ("/ca.crt", "/c.crt", "/c.key")
    assert cfg.tls_server_name == "api.internal" and cfg.verify_ssl is False


def test_server_alone_needs_no_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    cfg = kube_config._load_client_configuration(
        str(tmp_path / "missing"), None, K.Overrides(server="https://h:1"))
    assert cfg.host == "https://h:1"


@pytest.mark.parametrize("ask", [
    {"context": "c"}, {"overrides": K.Overrides(user="u")},
    {"overrides": K.Overrides(cluster="c")}])
def test_naming_a_context_user_or_cluster_without_a_kubeconfig_is_not_in_cluster(
        tmp_path, monkeypatch, ask):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")   # would be in-cluster
    with pytest.raises(K.ConfigError) as err:
        kube_config._load_client_configuration(str(tmp_path / "missing"), ask.get("context"),
                                     ask.get("overrides"))
    assert "no configuration has been provided" in str(err.value)


def test_kubeconfig_env_naming_only_missing_files(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    one = str(tmp_path / "a")
    monkeypatch.setenv("KUBECONFIG", one)
    with pytest.raises(K.ConfigError) as err:
        kube_config._load_client_configuration(None, None)
    assert f"the file in KUBECONFIG does not exist ({one})" in str(err.value)
    two = str(tmp_path / "b")
    monkeypatch.setenv("KUBECONFIG", f"{one}:{two}:")
    assert K.kubeconfig_paths(None) == [one, two]          # empty entries dropped
    with pytest.raises(K.ConfigError) as err:
        kube_config._load_client_configuration(None, None)
    assert f"none of the files in KUBECONFIG exists ({one}, {two})" in str(err.value)


def test_in_cluster_configuration_is_used_in_a_pod(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    _, config, _ = _client_modules()
    seen = []
    monkeypatch.setattr(config, "load_incluster_config",
                        lambda client_configuration: seen.append(client_configuration))
    cfg = kube_config._load_client_configuration(None, None)
    assert seen == [cfg]


@pytest.mark.parametrize(("text", "starts"), [
    # the client's own complaint, as it words it
    ("apiVersion: v1\nkind: Config\ncontexts: []\n",
     "Invalid kube-config file. Expected key current-context in "),
    # the loader tripping over a wrong shape (TypeError, AttributeError)
    ("- a\n- b\n", "invalid kubeconfig: list indices must be integers"),
    ("apiVersion: v1\ncurrent-context: t\ncontexts: [{name: t, context: {cluster: c}}]\n"
     "clusters: [{name: c, cluster: {server: 5}}]\n", "invalid kubeconfig: 'int' object"),
    # YAML that does not parse (any other exception): one line, no traceback
    ("{{{not yaml", "invalid kubeconfig: while parsing a flow mapping"),
])
def test_a_malformed_kubeconfig_is_a_one_line_config_error(tmp_path, monkeypatch, text, starts):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    kc = tmp_path / "kc"
    kc.write_text(text)
    with pytest.raises(K.ConfigError) as err:
        kube_config._load_client_configuration(str(kc), None)
    msg = str(err.value)
    assert msg.startswith(starts) and "\n" not in msg


def test_groups_without_a_user_to_impersonate_are_refused(kubeconfig):
    with pytest.raises(K.ConfigError, match="--as-group needs --as"):
        K.Kube.from_kubeconfig(kubeconfig, overrides=K.Overrides(impersonate_groups=("g",)))


def test_impersonation_headers_and_bearer_token_travel_with_each_request(kubeconfig):
    k = K.Kube.from_kubeconfig(kubeconfig, overrides=K.Overrides(
        impersonate="alice", impersonate_groups=("g1", "g2"), impersonate_uid="42"))
    try:
        pool = _with_pool(k, _Resp(200, b'{"ok": 1}'))
        assert k.request("GET", "GET", "/x") == {"ok": 1}
        headers = pool.calls[0][2]["headers"]
        assert headers["Impersonate-User"] == "alice"
        assert headers.getlist("Impersonate-Group") == ["g1", "g2"]
        assert headers["Impersonate-Uid"] == "42"
        assert headers["authorization"] == "Bearer abc"
        assert "Content-Type" not in headers
        assert k.host == "https://127.0.0.1:1"
    finally:
        k.close()


# -- namespaces from kubeconfig / pod ---------------------------------------------------------

def test_context_namespace_and_the_default(kubeconfig, monkeypatch):
    assert K.context_namespace(kubeconfig, None) == "team-a"
    assert K.context_namespace(kubeconfig, "bare") is None
    with pytest.raises(K.ConfigError, match='context "gone" does not exist'):
        K.context_namespace(kubeconfig, "gone")
    monkeypatch.setattr(kube_config, "IN_CLUSTER_NAMESPACE", "/nonexistent/namespace")
    assert K.default_namespace(kubeconfig, "bare") == "default"
    assert K.default_namespace(kubeconfig, None) == "team-a"


def test_no_kubeconfig_means_no_context_namespace_and_the_pods_namespace(tmp_path, monkeypatch):
    assert K.context_namespace(str(tmp_path / "missing"), None) is None
    ns = tmp_path / "namespace"
    ns.write_text("flux-system\n")
    monkeypatch.setattr(kube_config, "IN_CLUSTER_NAMESPACE", str(ns))
    assert K.in_cluster_namespace() == "flux-system"
    assert K.default_namespace(str(tmp_path / "missing"), None) == "flux-system"
    ns.write_text("\n")
    assert K.in_cluster_namespace() is None


# -- one request ----------------------------------------------------------------------------

def test_a_dry_run_write_carries_dry_run_all_and_a_json_body(kube):
    kube.dry_run = True
    pool = _with_pool(kube, _Resp(200, b"{}"), _Resp(200, b"{}"))
    seen = []
    kube.before_request = lambda verb, path: seen.append((verb, path))
    kube.merge_patch_hr("ns", "a b", {"spec": {"suspend": True}})
    method, url, kw = pool.calls[0]
    assert method == "PATCH" and "dryRun=All" in url and "/namespaces/ns/" in url
    assert url.split("?")[0].endswith("/helmreleases/a%20b")
    assert json.loads(kw["body"]) == {"spec": {"suspend": True}}
    assert kw["headers"]["Content-Type"] == K.MERGE_PATCH
    kube.request("GET", "GET", "/raw", body="already text")     # str/bytes bodies go as they are
    assert pool.calls[1][2]["body"] == "already text" and "dryRun" not in pool.calls[1][1]
    assert seen == [("PATCH", K.hr_path("ns", "a b")), ("GET", "/raw")]
    assert kube.stats.snapshot() == {"PATCH": 1, "GET": 1} and kube.stats.total() == 2


def test_an_empty_answer_is_an_empty_object_and_non_json_is_a_kube_error(kube):
    _with_pool(kube, _Resp(200, b""), _Resp(200, b"<html>proxy</html>"))
    assert kube.request("GET", "GET", "/x") == {}
    with pytest.raises(K.KubeError) as err:
        kube.request("GET", "GET", "/y")
    assert err.value.reason == "BadResponse"
    assert str(err.value) == "the API at https://127.0.0.1:1 answered GET /y with non-JSON"


def test_a_transport_failure_is_unreachable_in_one_line(kube):
    _with_pool(kube, urllib3.exceptions.MaxRetryError(None, "/x", "connection\n  refused"))
    with pytest.raises(K.Unreachable) as err:
        kube.request("CREATE", "POST", "/x")
    assert err.value.status == 0 and err.value.retryable
    assert str(err.value).startswith("cannot reach the Kubernetes API at https://127.0.0.1:1: ")
    assert "\n" not in str(err.value)


def test_an_error_answer_is_raised_as_its_subclass_with_the_servers_message(kube):
    body = json.dumps({"kind": "Status", "reason": "Forbidden", "message": "no\n way",
                       "details": {"name": "x", "kind": "helmreleases"}}).encode()
    _with_pool(kube, _Resp(403, body))
    with pytest.raises(K.Forbidden) as err:
        kube.request("GET", "GET", "/x")
    assert err.value.forbidden and str(err.value) == "no way" and err.value.reason == "Forbidden"


def test_a_streamed_request_returns_the_response_or_raises_after_releasing_it(kube):
    ok = _Resp(200)
    bad = _Resp(410, b'{"message": "too old resource version"}')
    pool = _with_pool(kube, ok, bad)
    assert kube.open_watch("/w", {}) is ok
    assert pool.calls[0][2]["preload_content"] is False
    assert pool.calls[0][2]["timeout"].read_timeout is None     # no timeout: watches may idle
    with pytest.raises(K.Gone) as err:
        kube.open_watch("/w", {}, timeout=5)
    assert bad.released and err.value.gone and str(err.value) == "too old resource version"
    assert pool.calls[1][2]["timeout"].read_timeout == 5


def test_error_bodies_that_are_not_status_objects(kube):
    e = kube_errors._error_from(404, b"404 page not found\n")
    assert isinstance(e, K.NotFound) and e.reason == "NotFound" and str(e) == "404 page not found"
    assert not e.object_missing          # a missing API, not a missing object
    e = kube_errors._error_from(418, b"[1, 2]")
    assert type(e) is K.KubeError and e.reason == "Error" and e.body == {}
    assert str(kube_errors._error_from(502, b"")) == "HTTP 502"
    assert kube_errors._error_from(401, b"").reason == "Unauthorized"


@pytest.mark.parametrize(("body", "attempt", "wait"), [
    ({"_retryAfter": "soon"}, 0, 0.2),                       # unparsable header: backoff
    ({"details": {"retryAfterSeconds": 3}}, 0, 3.0),         # the Status' own hint
    ({"details": "odd"}, 2, 0.8),
    ({"_retryAfter": "-4"}, 0, 0.0),                          # never negative
])
def test_retry_after_hints(body, attempt, wait):
    assert kube_transport._retry_after(K.kube_error(429, "TooManyRequests", "m", body), attempt) == wait


def test_ensure_connections_only_grows_the_pool(kube):
    old = _with_pool(kube)
    kube._cfg.connection_pool_maxsize = 4
    kube.ensure_connections(3)
    assert kube._pool is old
    kube.ensure_connections(16)
    assert kube._pool is not old and old.cleared == 1
    assert kube._cfg.connection_pool_maxsize == 16


# -- the typed calls --------------------------------------------------------------------------

def test_get_hr_missing_object_is_none_but_a_missing_api_raises(kube):
    missing = json.dumps({"message": "not found", "details": {"name": "a"}}).encode()
    _with_pool(kube, _Resp(404, missing), _Resp(404, b"404 page not found"))
    assert kube.get_hr("ns", "a") is None
    with pytest.raises(K.NotFound):
        kube.get_hr("ns", "a")


def test_get_or_none_reraises_anything_but_404(kube):
    _with_pool(kube, _Resp(404, b"{}"), _Resp(403, b'{"message": "denied"}'))
    assert kube.get_lease("ns", "l") is None
    with pytest.raises(K.Forbidden):
        kube.get_event("ns", "e")


def test_hr_api_served(kube):
    _with_pool(kube, _Resp(200, b"{}"), _Resp(404, b""), _Resp(401, b""))
    assert kube.hr_api_served() is True
    assert kube.hr_api_served() is False
    with pytest.raises(K.Unauthorized):
        kube.hr_api_served()


def test_delete_secret_preconditions_and_dry_run_travel_in_the_body(kube):
    kube.dry_run = True
    pool = _with_pool(kube, _Resp(200, b"{}"), _Resp(200, b"{}"))
    kube.delete_secret("ns", "s", "uid-1", "7")
    body = json.loads(pool.calls[0][2]["body"])
    assert body["preconditions"] == {"uid": "uid-1", "resourceVersion": "7"}
    assert body["dryRun"] == ["All"]
    kube.dry_run = False
    kube.delete_secret("ns", "s", "uid-1")
    body = json.loads(pool.calls[1][2]["body"])
    assert body["preconditions"] == {"uid": "uid-1"} and "dryRun" not in body


def test_deployment_pod_and_discovery_calls_hit_their_paths(kube):
    items = b'{"items": [{"metadata": {"name": "p"}}]}'
    pool = _with_pool(kube, _Resp(200, b'{"spec": {}}'), _Resp(200, b"{}"), _Resp(200, items),
                      _Resp(200, b'{"gitVersion": "v1.37.2"}'), _Resp(200, b"{}"),
                      _Resp(200, b"{}"), _Resp(200, b"{}"), _Resp(200, b"{}"))
    assert kube.get_deployment("flux-system", "helm-controller") == {"spec": {}}
    kube.scale_deployment("flux-system", "helm-controller", 0)
    assert kube.list_pods("flux-system", "app=helm-controller") == [{"metadata": {"name": "p"}}]
    assert kube.server_version() == {"gitVersion": "v1.37.2"}
    assert kube.list_deployments_any("app=x") == []
    kube.create_lease("ns", {"metadata": {"name": "l"}})
    kube.update_lease("ns", "l", {"metadata": {"name": "l"}})
    kube.patch_event("ns", "e", {"count": 2})
    paths = [(m, u.split("?")[0].removeprefix("https://127.0.0.1:1")) for m, u, _ in pool.calls]
    assert paths == [
        ("GET", "/apis/apps/v1/namespaces/flux-system/deployments/helm-controller"),
        ("PATCH", "/apis/apps/v1/namespaces/flux-system/deployments/helm-controller/scale"),
        ("GET", "/api/v1/namespaces/flux-system/pods"),
        ("GET", "/version"),
        ("GET", "/apis/apps/v1/deployments"),
        ("POST", "/apis/coordination.k8s.io/v1/namespaces/ns/leases"),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"),
        ("PATCH", "/api/v1/namespaces/ns/events/e"),
    ]
    assert json.loads(pool.calls[1][2]["body"]) == {"spec": {"replicas": 0}}


def test_watch_interrupted_by_the_transport_is_unreachable(kube, monkeypatch):
    class Broken:
        released = False

        def stream(self, size, decode_content=True):
            yield b'{"type": "ADDED", "object": {}}\n'
            raise urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead")

        def release_conn(self):
            self.released = True

    resp = Broken()
    monkeypatch.setattr(kube, "open_watch", lambda *a, **k: resp)
    opened = []
    events = []
    with pytest.raises(K.Unreachable, match="^watch interrupted: Connection broken"):
        for e in kube.watch_hrs("ns", None, "", opened=opened.append, send_initial_events=True):
            events.append(e)
    assert events == [{"type": "ADDED", "object": {}}] and opened == [resp] and resp.released


def test_watch_other_errors_propagate_unchanged(kube, monkeypatch):
    class Bad:
        def stream(self, size, decode_content=True):
            yield b"not json\n"

        def release_conn(self):
            pass

    monkeypatch.setattr(kube, "open_watch", lambda *a, **k: Bad())
    with pytest.raises(json.JSONDecodeError):
        list(kube.watch_hrs(None, None, "1"))


def test_paths_quote_names_and_leave_out_missing_parts():
    assert K.hr_path() == "/apis/helm.toolkit.fluxcd.io/v2/helmreleases"
    assert K.core_path("secrets") == "/api/v1/secrets"
    assert K.core_path("secrets", "n s", "a/b") == "/api/v1/namespaces/n%20s/secrets/a%2Fb"
    assert K.lease_path("ns") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
