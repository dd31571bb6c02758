"""What flux-plunger remembers about a server between runs (servers.py): a refused
watch-list, per server (URL + CA), for a bounded time, never failing a run it cannot be
written in; and ``Kube.watch_list`` loading it when the client is made and saving it on
the flip to False."""
from __future__ import annotations

import json

import pytest

from kubectl_flux_plunger import kube as K
from kubectl_flux_plunger.kube import servers
from kubectl_flux_plunger.kube.read import WATCH_LIST_PAUSE

pytestmark = pytest.mark.unit

CA_A = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
CA_B = "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n"


def _kubeconfig(tmp_path, server="https://127.0.0.1:6443", ca=CA_A, name="kubeconfig"):
    ca_file = tmp_path / f"{name}.ca"
    ca_file.write_text(ca)
    kc = tmp_path / name
    kc.write_text(f"""\
apiVersion: v1
kind: Config
current-context: t
clusters:
- name: t
  cluster: {{server: '{server}', certificate-authority: '{ca_file}'}}
users:
- name: u
  user: {{token: abc}}
contexts:
- name: t
  context: {{cluster: t, user: u}}
""")
    return str(kc)


@pytest.fixture(autouse=True)
def _no_kubeconfig_env(monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)


def test_the_cache_lives_under_xdg_cache_home_else_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert servers.cache_dir() == tmp_path / "xdg" / "kubectl-flux-plunger" / "servers"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert servers.cache_dir() == tmp_path / "home" / ".cache" / "kubectl-flux-plunger" / "servers"


def test_no_home_means_no_cache_rather_than_one_in_the_working_directory(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.chdir(tmp_path)
    f = servers.server_file("https://h", b"")
    assert servers.remember_watch_lists_refused(f, "https://h") is False
    assert list(tmp_path.iterdir()) == []


def test_one_file_per_server_url_and_ca():
    a = servers.server_file("https://10.0.0.1:6443", b"ca-a")
    assert a == servers.server_file("https://10.0.0.1:6443", b"ca-a")
    assert a.name.startswith("10.0.0.1_6443-") and a.suffix == ".json"
    assert a != servers.server_file("https://10.0.0.1:6443", b"ca-b")   # another cluster
    assert a != servers.server_file("https://10.0.0.2:6443", b"ca-a")


def test_a_refusal_is_remembered_for_the_ttl_then_probed_again(tmp_path):
    f = tmp_path / "s.json"
    assert servers.watch_lists_refused(f) is False            # nothing remembered
    assert servers.remember_watch_lists_refused(f, "https://h", now=1000.0)
    assert json.loads(f.read_text()) == {"server": "https://h", "watchList": False,
                                         "checked": 1000.0}
    assert servers.watch_lists_refused(f, now=1000.0 + servers.TTL - 1) is True
    assert servers.watch_lists_refused(f, now=1000.0 + servers.TTL) is False
    assert servers.watch_lists_refused(f, now=999.0) is False  # a clock set back: probe


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"watchList": false}',
                                  '{"watchList": true, "checked": 1e18}',
                                  '{"watchList": false, "checked": "x"}'])
def test_a_cache_file_that_says_nothing_usable_is_no_memory(tmp_path, text):
    f = tmp_path / "s.json"
    f.write_text(text)
    assert servers.watch_lists_refused(f) is False


def test_a_cache_that_cannot_be_written_is_no_failure(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    f = blocker / "servers" / "s.json"                         # its parent cannot be made
    assert servers.remember_watch_lists_refused(f, "https://h") is False
    assert servers.watch_lists_refused(f) is False


def test_read_ca_of_no_file_or_a_missing_one_is_empty(tmp_path):
    assert servers.read_ca(None) == b"" and servers.read_ca(str(tmp_path / "gone")) == b""


def test_kube_loads_the_memory_when_made_and_saves_the_flip(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    kc = _kubeconfig(tmp_path)
    first = K.Kube.from_kubeconfig(kc)
    assert first.watch_list is True
    first.watch_list = False                                   # the server refused one
    files = list((tmp_path / "cache" / "kubectl-flux-plunger" / "servers").iterdir())
    assert [f.name.split("-")[0] for f in files] == ["127.0.0.1_6443"]
    assert json.loads(files[0].read_text())["server"] == "https://127.0.0.1:6443"
    assert K.Kube.from_kubeconfig(kc).watch_list is False      # the next run remembers
    # the same address with another CA is another cluster: probed
    other = _kubeconfig(tmp_path, ca=CA_B, name="other")
    assert K.Kube.from_kubeconfig(other).watch_list is True
    # an expired memory is probed again
    monkeypatch.setattr(servers.time, "time", lambda: 4e9)
    assert K.Kube.from_kubeconfig(kc).watch_list is True


def test_kube_with_a_read_only_cache_still_falls_back(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    k = K.Kube.from_kubeconfig(_kubeconfig(tmp_path))
    k.watch_list = False
    assert k.watch_list is False                               # this run reads with GETs
    assert K.Kube.from_kubeconfig(_kubeconfig(tmp_path)).watch_list is True


def test_a_run_of_misses_pauses_watch_lists_and_is_not_remembered(tmp_path, monkeypatch):
    """Misses are passing (an apiserver restarting): the pause is this process's, for
    ``WATCH_LIST_PAUSE`` seconds; nothing is written for the next run."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    now = [100.0]
    monkeypatch.setattr("kubectl_flux_plunger.kube.read.time.monotonic", lambda: now[0])
    kc = _kubeconfig(tmp_path)
    k = K.Kube.from_kubeconfig(kc)
    assert [k.watch_lists.missed() for _ in range(3)] == [False, False, True]
    assert k.watch_list is False
    assert not (tmp_path / "cache" / "kubectl-flux-plunger" / "servers").exists()
    assert K.Kube.from_kubeconfig(kc).watch_list is True       # the next run: not paused
    now[0] += WATCH_LIST_PAUSE - 0.5
    assert k.watch_list is False
    now[0] += 0.5
    assert k.watch_list is True                                 # one is tried again
    k.watch_lists.served()
    assert [k.watch_lists.missed() for _ in range(3)] == [False, False, True]
