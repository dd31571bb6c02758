"""serve's start-up (serve/startup.py) without a cluster: the refusals and their exit statuses,
the Lease's namespace, and the clients made from one reading of the kubeconfig files; the one
rule for a namespace no flag names (kube.namespace_default)."""
from __future__ import annotations

import pytest

from kubectl_flux_plunger import kube as K
from kubectl_flux_plunger.kube import config as kube_config
from kubectl_flux_plunger.serve import startup
from kubectl_flux_plunger.serve.options import ServeConfig

pytestmark = pytest.mark.unit

KUBECONFIG = """\
apiVersion: v1
kind: Config
current-context: t
clusters:
- name: t
  cluster: {server: 'https://127.0.0.1:1'}
users:
- name: u
  user: {token: abc}
contexts:
- name: t
  context: {cluster: t, user: u, namespace: team-a}
- name: bare
  context: {cluster: t, user: u}
"""


@pytest.fixture
def kubeconfig(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kube_config, "IN_CLUSTER_NAMESPACE", str(tmp_path / "no-pod"))
    kc = tmp_path / "kubeconfig"
    kc.write_text(KUBECONFIG)
    return str(kc)


@pytest.fixture
def ran(monkeypatch):
    """What start() hands to the controller (nothing runs), and how often the kubeconfig
    files are read."""
    got: dict = {"reads": 0}
    from kubectl_flux_plunger.kube.official import _client_modules

    _client_modules()
    from kubernetes.config import kube_config as client_kube_config

    real = client_kube_config.KubeConfigMerger.load_config

    def load_config(self, path):
        got["reads"] += 1
        return real(self, path)

    def run(kube, cfg, *, lease_kube=None):
        got.update(kube=kube, cfg=cfg, lease_kube=lease_kube)
        return 0

    monkeypatch.setattr(client_kube_config.KubeConfigMerger, "load_config", load_config)
    monkeypatch.setattr(startup, "run", run)
    monkeypatch.setattr(startup.logs, "setup", lambda *a, **kw: None)
    return got


def start(kubeconfig, context=None, **settings):
    cfg = ServeConfig(metrics_addr=None, probe_addr=None, **settings)
    return startup.start(cfg, kubeconfig=kubeconfig, context=context, overrides=K.Overrides)


def test_the_kubeconfig_is_read_once_for_both_clients_and_the_lease_namespace(kubeconfig, ran):
    assert start(kubeconfig) == 0
    assert ran["reads"] == 1
    assert ran["cfg"].lease_namespace == "team-a"
    assert ran["kube"].request_timeout == startup.DEFAULT_REQUEST_TIMEOUT
    assert ran["lease_kube"] is not ran["kube"]
    assert ran["lease_kube"].request_timeout == 5.0   # the retry period, at least 1s
    assert ran["kube"].host == ran["lease_kube"].host == "https://127.0.0.1:1"


def test_without_leader_election_one_client(kubeconfig, ran):
    assert start(kubeconfig, leader_elect=False, request_timeout=5.0) == 0
    assert ran["reads"] == 1 and ran["lease_kube"] is None
    assert ran["kube"].request_timeout == 5.0


def test_a_namespace_given_is_kept(kubeconfig, ran):
    assert start(kubeconfig, lease_namespace="elsewhere") == 0
    assert ran["cfg"].lease_namespace == "elsewhere"


def test_the_pods_namespace_comes_first(kubeconfig, ran, tmp_path, monkeypatch):
    pod = tmp_path / "pod-namespace"
    pod.write_text("flux-plunger\n")
    monkeypatch.setattr(kube_config, "IN_CLUSTER_NAMESPACE", str(pod))
    assert start(kubeconfig) == 0
    assert ran["cfg"].lease_namespace == "flux-plunger"


@pytest.mark.parametrize(("kwargs", "code", "text"), [
    ({"context": "bare"}, 2, "cannot tell the namespace of the leader-election Lease"),
    ({"context": "gone"}, 2, "cannot tell the namespace of the leader-election Lease"),
    ({"context": "gone", "leader_elect": False}, 1, 'context "gone" does not exist'),
    ({"lease_name": "Bad_Name"}, 2, "--leader-election-id 'Bad_Name': a Lease name must be"),
    ({"lease_namespace": " "}, 2, "--leader-election-namespace must not be empty"),
])
def test_refusals(kubeconfig, ran, kwargs, code, text):
    with pytest.raises(startup.Refused) as refused:
        start(kubeconfig, **kwargs)
    assert refused.value.code == code
    assert str(refused.value).startswith(text)
    assert "cfg" not in ran


def test_a_missing_kubeconfig_is_refused_before_anything_else(tmp_path, ran):
    with pytest.raises(startup.Refused) as refused:
        start(str(tmp_path / "missing"), lease_name="Bad_Name")
    assert refused.value.code == 1
    assert str(refused.value) == f"stat {tmp_path / 'missing'}: no such file or directory"
    assert ran["reads"] == 0


def test_one_rule_for_a_namespace_no_flag_names(tmp_path, monkeypatch):
    pod = tmp_path / "pod-namespace"
    monkeypatch.setattr(kube_config, "IN_CLUSTER_NAMESPACE", str(pod))
    context = lambda: "ctx-ns"
    none = lambda: None
    # outside a pod
    assert K.namespace_default(context, pod_first=False, fallback="default") == "ctx-ns"
    assert K.namespace_default(context, pod_first=True, fallback=None) == "ctx-ns"
    assert K.namespace_default(none, pod_first=True, fallback=None) is None
    assert K.namespace_default(None, pod_first=True, fallback="flux-plunger") == "flux-plunger"
    # in a pod
    pod.write_text("pod-ns\n")
    assert K.namespace_default(context, pod_first=False, fallback="default") == "ctx-ns"
    assert K.namespace_default(none, pod_first=False, fallback="default") == "pod-ns"
    assert K.namespace_default(context, pod_first=True, fallback=None) == "pod-ns"
    assert K.namespace_default(None, pod_first=True, fallback="flux-plunger") == "pod-ns"
    # the kubeconfig is not consulted once the pod's namespace answers
    assert K.namespace_default(lambda: pytest.fail("read"), pod_first=True, fallback=None) == "pod-ns"
