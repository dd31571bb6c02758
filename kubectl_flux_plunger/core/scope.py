"""What a flux-plunger install watches — a namespace (or every one) and a label selector (or
none) — and whether two installs can be shown never to watch the same HelmRelease.

Every flux-plunger writes as the field manager ``flux-plunger``, so two controllers whose
scopes overlap cannot tell each other's suspensions from crash leftovers and undo each
other's recoveries.  ``serve`` compares its scope with every other live flux-plunger Lease
(``serve/overlap.py``); this module is the comparison.  It is conservative: ``disjoint`` is
True only when a simple rule proves it, and everything else (including a selector that does
not parse, or a scope nobody recorded) counts as an overlap.  Pure: no I/O.

The rules, on the same label key ``k`` (``k=a`` is ``k in (a)``, ``k!=a`` is ``k notin (a)``):

* ``k in (S)`` against ``k in (T)`` when S and T share no value (``k=a`` / ``k=b``);
* ``k in (S)`` against ``k notin (T)`` when every value of S is in T;
* ``k in (S)`` or ``k`` (exists) against ``!k`` (Flux's shards against its main instance);

and two different namespaces are disjoint whatever the selectors.
"""

from __future__ import annotations

from dataclasses import dataclass

from .selector import Op, Requirement, SelectorError, parse

__all__ = ["Scope", "disjoint"]


@dataclass(frozen=True)
class Scope:
    """``namespace``: the one watched namespace (None or empty: every namespace);
    ``selector``: the label selector as written (None or empty: every release)."""

    namespace: str | None = None
    selector: str | None = None

    def __str__(self) -> str:
        parts = [f"-n {self.namespace}" if self.namespace else "-A"]
        if self.selector:
            parts.append(f"-l {self.selector!r}")
        return " ".join(parts)


def _requirements(selector: str | None) -> tuple[Requirement, ...]:
    if selector is None or not selector.strip():
        return ()
    return parse(selector).requirements


def _as_set(r: Requirement) -> Requirement:
    """``=`` as ``in`` of one value, ``!=`` as ``notin`` of one value."""
    if r.op is Op.EQUALS:
        return Requirement(r.key, Op.IN, r.values)
    if r.op is Op.NOT_EQUALS:
        return Requirement(r.key, Op.NOT_IN, r.values)
    return r


def _excludes(x: Requirement, y: Requirement) -> bool:
    """No set of labels satisfies both ``x`` and ``y`` (the same key), by the rules above."""
    x, y = _as_set(x), _as_set(y)
    if y.op is Op.IN and x.op is not Op.IN:
        x, y = y, x  # the `in` side first, when there is one
    if x.op is Op.IN:
        if y.op is Op.IN:
            return not set(x.values) & set(y.values)
        if y.op is Op.NOT_IN:
            return set(x.values) <= set(y.values)
        return y.op is Op.NOT_EXISTS
    return {x.op, y.op} == {Op.EXISTS, Op.NOT_EXISTS}


def disjoint(a: Scope, b: Scope) -> bool:
    """True only when no HelmRelease can be in both ``a`` and ``b``."""
    if a.namespace and b.namespace and a.namespace != b.namespace:
        return True
    try:
        ra, rb = _requirements(a.selector), _requirements(b.selector)
    except SelectorError:
        return False  # unreadable: it may select anything
    return any(_excludes(x, y) for x in ra for y in rb if x.key == y.key)
