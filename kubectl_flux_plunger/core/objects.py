"""Type names for what the package passes around: Kubernetes objects as the parsed JSON the
apiserver returns.  Nothing here checks a shape; readers still treat every field as optional."""

from __future__ import annotations

import re
from typing import Any, TypeAlias

Obj: TypeAlias = dict[str, Any]
"""One object (or any JSON mapping inside one): a HelmRelease, a Secret, a Lease, a patch."""


def compare_resource_versions(a: str, b: str) -> int | None:
    """-1, 0 or 1 as ``a`` is older than, the same as or newer than ``b`` — two
    resourceVersions of objects of one resource — or None when either is not a positive
    decimal integer without leading zeros.

    Kubernetes made resourceVersions comparable this way in 1.35 (KEP-5504, with conformance
    tests; etcd-backed servers always issued them so).  None tells the caller to treat the
    two as unordered, which every caller here takes as "newer": nothing is skipped."""
    if not (_well_formed(a) and _well_formed(b)):
        return None
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


def _well_formed(rv: object) -> bool:
    return isinstance(rv, str) and rv.isascii() and rv.isdecimal() and rv[0] != "0"


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")


def lease_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a Lease (a DNS subdomain), or None."""
    if not name:
        return "must not be empty"
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        return (
            "a Lease name must be a DNS subdomain: lower-case alphanumerics, '-' and '.', "
            "starting and ending with an alphanumeric, at most 253 characters"
        )
    return None
