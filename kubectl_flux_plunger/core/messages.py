"""The static words of flux-plunger's Events (SPEC §6): one message per reason and cause,
no names, no numbers, so repeats on one object fold into one counted Event.  ``plan``
re-exports every name here; callers name them as ``plan.X``."""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class EventSpec:
    """An Event to record on the HelmRelease: reason, type ("Normal"/"Warning"), static message."""

    reason: str
    type: str
    message: str


NORMAL, WARNING = "Normal", "Warning"

SUSPENSION_NOT_OWNED = EventSpec(
    "SuspensionNotOwned",
    NORMAL,
    "Left a suspension set by another manager untouched; flux-plunger only lifts suspensions "
    "it set itself",
)
SUSPENSION_NOT_OWNED_AFTER_RECOVERY = EventSpec(
    "SuspensionNotOwned",
    WARNING,
    "Left a suspension flux-plunger does not own untouched on a release it recovered before; "
    "if an older flux-plunger left it, resume the release once you have checked nobody else "
    "needs it suspended",
)
TERMINATING_WHILE_SUSPENDED = EventSpec(
    "TerminatingWhileSuspended",
    NORMAL,
    "HelmRelease is being deleted while suspended by another manager; helm-controller skips "
    "the Helm uninstall of a suspended release and leaves its resources in place",
)
TERMINATING_WHILE_SUSPENDED_AFTER_RECOVERY = EventSpec(
    "TerminatingWhileSuspended",
    WARNING,
    "HelmRelease is being deleted while suspended by another manager after flux-plunger "
    "recovered it; helm-controller skips the Helm uninstall, so its resources are left behind",
)
UNINSTALL_FENCE_HELD = EventSpec(
    "UninstallFenceHeld",
    WARNING,
    "HelmRelease delete is held by flux-plunger's uninstall fence until helm-controller has "
    "reconciled the unsuspended release; check that helm-controller is running and "
    "reconciling it",
)
UNSUSPEND_FAILED = EventSpec(
    "UnsuspendFailed",
    WARNING,
    "Could not lift a suspension flux-plunger set; a running flux-plunger controller retries, "
    "and `kubectl flux-plunger resume-owned` lifts it. While the release stays suspended, "
    "deleting it skips the Helm uninstall and orphans its resources",
)
RECOVERY_DEFERRED = EventSpec(
    "RecoveryDeferred",
    NORMAL,
    "Recovery deferred: another manager took spec.suspend or the release began terminating "
    "between read and write; the controller's next pass (or the next recover) decides again",
)
RECOVERY_FAILED = EventSpec(
    "RecoveryFailed",
    WARNING,
    "Recovery of the stuck release failed; a running flux-plunger controller retries with "
    "backoff. The cause is in the controller's log and in `kubectl flux-plunger recover`",
)

RECOVERED = EventSpec(
    "Recovered",
    NORMAL,
    "Deleted the Helm storage revision that blocked every helm-controller action (its "
    '"has no deployed releases", StateError or "cannot reuse a name"); helm-controller '
    "reconciles the release again",
)


class Stuck(str, enum.Enum):
    """Why flux-plunger leaves a stuck release stuck, closed: the ``reason`` label of serve's
    ``flux_plunger_releases_left_stuck`` gauge, and one static ``RecoverySkipped`` message
    each (``RECOVERY_SKIPPED``).  docs/INSTALL.md says what the operator does for each."""

    CORRUPT_PAYLOAD = "corrupt-payload"
    REMOTE_UNSUPPORTED = "remote-unsupported"
    NO_STORAGE = "no-storage"
    UNNUMBERED_REVISION = "unnumbered-revision"
    DUPLICATE_REVISION = "duplicate-revision"
    VERSION_MISMATCH = "version-mismatch"
    UNEXPECTED_STATUS = "unexpected-status"
    # issue 56: StateError over a history helm-controller <= v1.4 wrote, a superseded
    # revision beneath the newest
    LEGACY_HISTORY = "legacy-history"
    # SPEC §6 "Holding a release" (issue 55): another HelmRelease names the same Helm
    # release, or the tenant identity helm-controller acts as may not delete its storage
    CLAIMED_TWICE = "claimed-twice"
    OUTSIDE_AUTHORITY = "outside-authority"
    # SPEC §6 "Knowing when to stop" (issue 57): the recoveries in a row it may make failed
    GIVEN_UP = "given-up"

    def __str__(self) -> str:
        return self.value


_SKIPPED = "Recovery skipped, the release stays stuck until it is repaired by hand: "
RECOVERY_SKIPPED = {
    Stuck.CORRUPT_PAYLOAD: EventSpec(
        "RecoverySkipped",
        WARNING,
        _SKIPPED + "the payload of the newest Helm storage revision cannot be decoded, so "
        "flux-plunger cannot prove it is the revision that blocks upgrades",
    ),
    Stuck.REMOTE_UNSUPPORTED: EventSpec(
        "RecoverySkipped",
        WARNING,
        _SKIPPED + "spec.kubeConfig reaches the remote cluster in a way flux-plunger does not "
        "support (a workload-identity configMapRef, an exec plugin, an auth-provider or a "
        "proxy)",
    ),
    Stuck.NO_STORAGE: EventSpec(
        "RecoverySkipped",
        WARNING,
        _SKIPPED + "no Helm storage Secret of the release is where its HelmRelease says "
        "Helm keeps it (release name, storage namespace)",
    ),
    Stuck.UNNUMBERED_REVISION: EventSpec(
        "RecoverySkipped",
        WARNING,
        _SKIPPED + "no Helm storage Secret of the release carries a revision number",
    ),
    Stuck.DUPLICATE_REVISION: EventSpec(
        "RecoverySkipped",
        WARNING,
        _SKIPPED + "the newest revision of the release is stored in more than one Secret",
    ),
    Stuck.VERSION_MISMATCH: EventSpec(
        "RecoverySkipped",
        WARNING,
        _SKIPPED + "the payload of the newest Helm storage revision records another version "
        "than its Secret",
    ),
    Stuck.UNEXPECTED_STATUS: EventSpec(
        "RecoverySkipped",
        WARNING,
        _SKIPPED + "the newest Helm storage revision has a status flux-plunger never deletes",
    ),
    Stuck.LEGACY_HISTORY: EventSpec(
        "RecoverySkipped",
        WARNING,
        _SKIPPED + "helm-controller cannot place the newest Helm storage revision, and the "
        "latest snapshot of its status.history is one an older helm-controller wrote (no "
        "apiVersion), which a newer one verifies against nothing: deleting the revision would "
        "leave a superseded one it cannot place either. Clearing the HelmRelease's "
        "status.history makes helm-controller take the release for unmanaged; flux-plunger "
        "recovers it from there",
    ),
    Stuck.CLAIMED_TWICE: EventSpec(
        "RecoverySkipped",
        WARNING,
        _SKIPPED + "another HelmRelease names the same Helm release (release name, storage "
        "namespace, cluster); flux-plunger holds a release only when it holds every "
        "HelmRelease that claims it, so it writes nothing while two do",
    ),
    Stuck.OUTSIDE_AUTHORITY: EventSpec(
        "RecoverySkipped",
        WARNING,
        _SKIPPED + "the ServiceAccount helm-controller acts as for this HelmRelease "
        "(spec.serviceAccountName, or its --default-service-account) may not delete Helm "
        "storage Secrets in the storage namespace, and flux-plunger acts with no more "
        "authority than helm-controller has",
    ),
    Stuck.GIVEN_UP: EventSpec(
        "RecoverySkipped",
        WARNING,
        _SKIPPED + "given up, it got stuck again after each of the recoveries in a row "
        "flux-plunger may make (its chart or values still fail); a change (a new generation, "
        "chart revision or values, `flux reconcile`) or `kubectl flux-plunger recover` on it "
        "by name starts again",
    ),
}
