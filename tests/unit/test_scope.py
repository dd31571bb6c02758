"""scope.py: whether two flux-plunger installs' scopes (namespace + label selector) can be
shown never to select the same HelmRelease — the conservative rules serve's overlap check
(serve/overlap.py) rests on.  Every "disjoint" verdict is also checked against label sets
that would match both, so a rule that proves too much fails here."""
from __future__ import annotations

import itertools

import pytest

from kubectl_flux_plunger.core.scope import Scope, disjoint
from kubectl_flux_plunger.core.selector import parse

pytestmark = pytest.mark.unit

K = "sharding.fluxcd.io/key"


@pytest.mark.parametrize(("a", "b"), [
    (f"{K}=a", f"{K}=b"),
    (f"{K}==a", f"{K}=b"),
    (f"{K}=a", f"!{K}"),                       # a shard and Flux's main instance
    (f"!{K}", f"{K} in (a, b)"),
    (f"{K}", f"!{K}"),                         # exists / does not exist
    (f"{K} in (a, b)", f"{K} in (c)"),
    (f"{K} in (a, b)", f"{K} notin (a, b, c)"),
    (f"{K}=a", f"{K}!=a"),
    (f"{K} notin (a)", f"{K}=a"),               # either order
    (f"team=x,{K}=a", f"{K}=b,team=x"),         # one excluding pair is enough
])
def test_shown_disjoint(a, b):
    assert disjoint(Scope(None, a), Scope(None, b))
    assert disjoint(Scope(None, b), Scope(None, a))
    _no_release_in_both(a, b)


@pytest.mark.parametrize(("a", "b"), [
    (f"{K}=a", f"{K}=a"),                       # two shards installed with one selector
    (None, f"{K}=a"),                           # an install watching everything
    ("", f"!{K}"),
    (None, None),
    (f"{K}=a", "team=x"),                       # other keys: a release may carry both
    (f"{K} in (a, b)", f"{K} in (b, c)"),
    (f"{K} in (a, b)", f"{K} notin (a)"),
    (f"{K} notin (a)", f"{K} notin (b)"),       # both select releases without the key
    (f"!{K}", f"{K}!=a"),
    (f"!{K}", f"!{K}"),
    (f"{K}", f"{K}=a"),
    (f"{K}>1", f"!{K}"),                        # no rule for > and <: cannot be shown
    (f"{K}=a", "not a selector ("),             # unreadable: it may select anything
])
def test_cannot_be_shown_disjoint(a, b):
    assert not disjoint(Scope(None, a), Scope(None, b))
    assert not disjoint(Scope(None, b), Scope(None, a))


def test_namespaces():
    assert disjoint(Scope("team-a", None), Scope("team-b", None))
    assert disjoint(Scope("team-a", f"{K}=a"), Scope("team-b", f"{K}=a"))
    assert not disjoint(Scope("team-a", None), Scope("team-a", None))
    assert not disjoint(Scope("team-a", None), Scope(None, None))   # every namespace
    assert not disjoint(Scope("", None), Scope("team-a", None))
    assert disjoint(Scope("team-a", f"{K}=a"), Scope(None, f"{K}=b"))


def test_scope_words():
    assert str(Scope()) == "-A"
    assert str(Scope("team-a", f"{K}=a")) == f"-n team-a -l '{K}=a'"


def _no_release_in_both(a: str, b: str) -> None:
    """Brute force over label sets built from the values the selectors name: none matches
    both (what "disjoint" promises)."""
    sa, sb = parse(a), parse(b)
    keys = sorted({r.key for r in sa.requirements + sb.requirements})
    values = sorted({v for r in sa.requirements + sb.requirements for v in r.values} | {"z"})
    for choice in itertools.product([None, *values], repeat=len(keys)):
        labels = {k: v for k, v in zip(keys, choice) if v is not None}
        assert not (sa.matches(labels) and sb.matches(labels)), labels
