"""serve's configuration as one object: ServeConfig refuses what cannot work on construction
(the usage errors of `serve`, first one first) and cuts the parts the pieces take."""
from __future__ import annotations

import dataclasses

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core.scope import Scope
from kubectl_flux_plunger.serve.options import (
    DrainOptions,
    Invalid,
    LeaseConfig,
    LeaseTimings,
    ServeConfig,
)

pytestmark = pytest.mark.unit


def refused(**kw) -> str:
    with pytest.raises(Invalid) as exc:
        ServeConfig(**kw)
    return str(exc.value)


def test_the_defaults_and_keyword_construction_are_accepted():
    cfg = ServeConfig(namespace="ns", leader_elect=False, metrics_addr=None, probe_addr=None,
                      handshake_timeout=30, stop_timeout=5, drain_timeout=10, fence_recheck=0.5)
    assert cfg.metrics_addr is None and cfg.probe_addr is None
    assert ServeConfig().metrics_addr == ("", 8080)


@pytest.mark.parametrize("kw,message", [
    ({"namespace": " "}, "--namespace must not be empty"),
    ({"selector": ""}, "--selector must not be empty"),
    ({"request_timeout": -1}, "--request-timeout must not be negative"),
    ({"handshake_timeout": 0}, "--handshake-timeout must be positive (got 0s)"),
    ({"backup_namespace": ""}, "--backup-secret-namespace must not be empty"),
    ({"backup_retention": 0}, "--backup-retention must be positive"),
    ({"metrics_bind_address": "nope"},
     "invalid --metrics-bind-address 'nope': use HOST:PORT, :PORT or 0 to disable"),
    ({"health_probe_bind_address": "x:y"},
     "invalid --health-probe-bind-address 'x:y': port must be a number"),
])
def test_each_refusal_is_one_line_naming_the_flag(kw, message):
    assert refused(**kw) == message


def test_the_first_problem_in_command_line_order_is_the_one_reported():
    # as serve always reported them: the scope, the timings, the outputs, the addresses
    assert refused(namespace="", handshake_timeout=0, metrics_bind_address="nope") == (
        "--namespace must not be empty")
    assert refused(handshake_timeout=0, backup_retention=0, metrics_bind_address="nope") == (
        "--handshake-timeout must be positive (got 0s)")
    assert refused(backup_retention=0, metrics_bind_address="nope") == (
        "--backup-retention must be positive")


def test_the_bind_address_flags_are_parsed_into_the_addresses():
    cfg = ServeConfig(metrics_bind_address="0", health_probe_bind_address="127.0.0.1:9000")
    assert cfg.metrics_addr is None and cfg.probe_addr == ("127.0.0.1", 9000)
    # a copy keeps them (the flags are not fields)
    assert dataclasses.replace(cfg, lease_namespace="x").probe_addr == ("127.0.0.1", 9000)


def test_a_replace_is_checked_again():
    with pytest.raises(Invalid):
        dataclasses.replace(ServeConfig(), renew_deadline=40)


def test_the_lease_timings_relations_only_with_leader_election():
    assert LeaseTimings(15, 10, 2).problem() is None
    assert "must be shorter than --lease-duration" in (LeaseTimings(10, 10, 2).problem() or "")
    assert "times 1.2 (jitter)" in (LeaseTimings(15, 10, 9).problem() or "")
    assert ServeConfig(leader_elect=False, renew_deadline=20).renew_deadline == 20


def test_the_parts_the_pieces_take():
    cfg = ServeConfig(namespace="apps", selector="shard=a", lease_namespace="flux",
                      lease_duration=20, renew_deadline=12, retry_period=3, fence_recheck=0.25)
    assert cfg.scope == Scope("apps", "shard=a")
    assert cfg.lease("me") == LeaseConfig(
        "flux", C.LEASE_NAME, "me", LeaseTimings(20, 12, 3),
        {C.LEASE_SELECTOR_ANNOTATION: "shard=a", C.LEASE_NAMESPACE_ANNOTATION: "apps"})
    assert cfg.drain == DrainOptions(Scope("apps", "shard=a"), poll=0.25)
    assert ServeConfig().drain.poll == 1.0
    with pytest.raises(ValueError, match="needs the Lease's namespace"):
        ServeConfig().lease("me")
