"""Which HelmReleases a verb works on: names, a namespace, all namespaces, a selector."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.objects import Obj
from ..core.selector import Selector, parse
from ..kube import Kube, NotFound


class SelectionError(Exception):
    """A named release or the API itself is missing; the message is one line."""


@dataclass(frozen=True)
class Selection:
    namespace: str | None  # None with all_namespaces
    all_namespaces: bool = False
    selector: str | None = None
    names: tuple[str, ...] = field(default_factory=tuple)

    def matcher(self) -> Selector | None:
        """The parsed ``selector`` (checked at flag parsing), for the reads that do not go
        through the LIST: every fresh read that decides is held against it."""
        return parse(self.selector) if self.selector and self.selector.strip() else None


NO_FLUX = (
    'the server doesn\'t have a resource type "helmreleases" in '
    "helm.toolkit.fluxcd.io/v2 (is Flux installed?)"
)


def fetch(
    kube: Kube, sel: Selection, read: Callable[[str, str], Obj | None] | None = None
) -> tuple[list[Obj], list[str]]:
    """Fresh reads of the selected releases.  Returns (releases, not-found errors).
    ``read(namespace, name)`` reads a named release (default: a GET).

    No discovery round trip: a missing CRD answers the read itself with a 404 that names
    no object, which tells it from a missing release."""
    try:
        return _fetch(kube, sel, read or kube.get_hr)
    except NotFound as exc:
        if exc.object_missing:
            raise
        raise SelectionError(NO_FLUX) from None


def _fetch(
    kube: Kube, sel: Selection, read: Callable[[str, str], Obj | None]
) -> tuple[list[Obj], list[str]]:
    if sel.names:
        found, missing = [], []
        for name in dict.fromkeys(sel.names):
            hr = read(sel.namespace or "default", name)
            if hr is None:
                missing.append(
                    f'helmreleases.helm.toolkit.fluxcd.io "{name}" not found in '
                    f'namespace "{sel.namespace}"'
                )
            else:
                found.append(hr)
        return found, missing
    items = kube.list_hrs(None if sel.all_namespaces else sel.namespace, sel.selector)
    items.sort(key=lambda h: (h["metadata"].get("namespace", ""), h["metadata"]["name"]))
    return items, []
