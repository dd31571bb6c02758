"""Small builders for HelmRelease dicts shaped like the apiserver's JSON (unit tests only)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterable

from kubectl_flux_plunger.core import constants
from kubectl_flux_plunger.kube import WatchLists

CREATED = "2026-11-29T19:00:00Z"
NOW = datetime(2026, 11, 29, 20, 0, 0, tzinfo=timezone.utc)
STUCK_MESSAGE = (
    "Helm upgrade failed for release default/demo with chart demo@0.1.0: "
    '"demo" has no deployed releases'
)


def managed_entry(manager: str, operation: str, owns_suspend: bool) -> dict:
    """One managedFields entry; owning spec.suspend or, otherwise, only an annotation."""
    if owns_suspend:
        fields: dict[str, Any] = {"f:spec": {"f:suspend": {}}}
    else:
        fields = {"f:metadata": {"f:annotations": {"f:example": {}}}}
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": constants.HR_API_VERSION,
        "time": CREATED,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }


def stuck_condition(observed_generation: int | None = None, reason: str = "UpgradeFailed") -> dict:
    """A Ready=False condition carrying Helm's "has no deployed releases" message."""
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": reason,
        "message": STUCK_MESSAGE,
        "lastTransitionTime": CREATED,
    }
    if observed_generation is not None:
        condition["observedGeneration"] = observed_generation
    return condition


def state_error_condition(status: str = "uninstalling", observed_generation: int | None = None,
                          reason: str = "StateError") -> dict:
    """helm-controller's Ready=False StateError, quoting the status it cannot place."""
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": reason,
        "message": "Could not determine release state: unable to determine state for release "
                   f"with status '{status}'",
        "lastTransitionTime": CREATED,
    }
    if observed_generation is not None:
        condition["observedGeneration"] = observed_generation
    return condition


def history(version: int, status: str, name: str = "demo", namespace: str = "default",
            api_version: str | None = "v2") -> dict:
    """``status.history`` as helm-controller records it: the latest snapshot first.  A
    snapshot helm-controller v1.5+ wrote carries ``apiVersion: v2``; ``api_version=None``
    gives a legacy one (helm-controller <= v1.4 wrote none)."""
    snapshot = {"name": name, "namespace": namespace, "version": version,
                "status": status, "digest": "sha256:0", "chartName": "demo",
                "chartVersion": "0.1.0", "configDigest": "sha256:1"}
    if api_version is not None:
        snapshot["apiVersion"] = api_version
    return {"history": [snapshot]}


def ready_condition() -> dict:
    """A healthy Ready=True condition."""
    return {
        "type": "Ready",
        "status": "True",
        "reason": "UpgradeSucceeded",
        "message": "Helm upgrade succeeded",
        "lastTransitionTime": CREATED,
    }


def name_in_use_condition(type: str = "Ready", spelling: str = "reuse",
                          chart: str = "demo@0.1.0") -> dict:
    """helm-controller's failed install over an ``uninstalled`` newest revision: Helm's name
    check refuses (Helm v4 "reuse", Helm v3 "re-use")."""
    return {
        "type": type,
        "status": "False",
        "reason": "InstallFailed",
        "message": f"Helm install failed for release default/demo with chart {chart}: release "
                   f"name check failed: cannot {spelling} a name that is still in use",
        "lastTransitionTime": CREATED,
    }


def hr(
    name: str = "demo",
    namespace: str = "default",
    *,
    suspend: bool | None = None,
    finalizers: Iterable[str] = (),
    managed: Iterable[tuple[str, str, bool]] = (),
    conditions: Iterable[dict] = (),
    annotations: dict | None = None,
    generation: int = 1,
    observed_generation: int | None = None,
    last_attempted_generation: int | None = None,
    deletion_timestamp: str | None = None,
    spec_extra: dict | None = None,
    status_extra: dict | None = None,
    uid: str = "uid-1",
    rv: str = "100",
) -> dict:
    """A HelmRelease dict; ``managed`` entries are (manager, operation, owns_suspend)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "resourceVersion": rv,
        "generation": generation,
        "creationTimestamp": CREATED,
    }
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    if managed:
        metadata["managedFields"] = [managed_entry(*entry) for entry in managed]
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if deletion_timestamp is not None:
        metadata["deletionTimestamp"] = deletion_timestamp
    spec: dict[str, Any] = {
        "interval": "5m",
        "chart": {
            "spec": {"chart": "demo", "sourceRef": {"kind": "HelmRepository", "name": "demo"}},
        },
    }
    if suspend is not None:
        spec["suspend"] = suspend
    spec.update(spec_extra or {})
    status: dict[str, Any] = {}
    if conditions:
        status["conditions"] = list(conditions)
    if observed_generation is not None:
        status["observedGeneration"] = observed_generation
    if last_attempted_generation is not None:
        status["lastAttemptedGeneration"] = last_attempted_generation
    status.update(status_extra or {})
    return {
        "apiVersion": constants.HR_API_VERSION,
        "kind": constants.HR_KIND,
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


OURS = (constants.FIELD_MANAGER, "Apply", True)
CLIENT_SIDE = (constants.CLIENT_SIDE_MANAGER, "Update", True)


class WatchListOf:
    """A fake kube's ``watch_list`` as ``Kube`` derives it from its ``watch_lists``:
    usable unless refused or paused; set False, refused."""

    watch_lists: WatchLists

    @property
    def watch_list(self) -> bool:
        return self.watch_lists.usable

    @watch_list.setter
    def watch_list(self, value: bool) -> None:
        self.watch_lists.refused = not value
