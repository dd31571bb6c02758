"""The on-cluster contract (SPEC §3).  Keep these values: a cluster can move between the
reference controller and this one with no stranded state."""

FIELD_MANAGER = "flux-plunger"  # SSA manager; the only ownership evidence
CLIENT_SIDE_MANAGER = "flux-client-side-apply"  # shared; annotation writes only, never ownership
FENCE = "flux-plunger.cozystack.io/uninstall-fence"
PROCESSED_ANNOTATION = "flux-plunger.cozystack.io/last-processed-version"
LEGACY_SUSPENDED_ANNOTATION = "flux-plunger.cozystack.io/suspended"  # older flux-plunger marker
HELM_CONTROLLER_FINALIZER = "finalizers.fluxcd.io"
LEASE_NAME = "flux-plunger.cozystack.io"  # serve --leader-election-id's default
# what a controller watches, recorded on its Lease (sharding): `status` matches releases
# against them; "" = every label / every namespace
LEASE_SELECTOR_ANNOTATION = "flux-plunger.cozystack.io/selector"
LEASE_NAMESPACE_ANNOTATION = "flux-plunger.cozystack.io/watch-namespace"
EVENT_COMPONENT = "flux-plunger"
# The Flux Operator's Web UI shows "Suspended by <value>" from this annotation (its Suspend
# sets it, its Resume deletes it).  flux-plunger writes it with its suspension, one value for
# every flux-plunger process (they all write as FIELD_MANAGER; `status` names the process),
# never over another name, and removes it only with its own suspension (writes.py).
SUSPENDED_BY_ANNOTATION = "fluxcd.controlplane.io/suspendedBy"
SUSPENDED_BY = FIELD_MANAGER

HR_GROUP = "helm.toolkit.fluxcd.io"
HR_VERSION = "v2"
HR_API_VERSION = f"{HR_GROUP}/{HR_VERSION}"
HR_KIND = "HelmRelease"
HR_PLURAL = "helmreleases"

# The faces of a release stuck for good (SPEC §4; docs/DESIGN.md "Faces of a stuck release"):
# Helm's upgrade error when helm-controller took the release for unmanaged,
# helm-controller's own StateError when its history recorded a revision it cannot place, and
# Helm's install error when the newest revision is `uninstalled` with its history kept
# (helm-controller installs over it; Helm refuses a name with history unless Replace).
STUCK_MESSAGE = "has no deployed releases"
STATE_ERROR_REASON = "StateError"
STATE_ERROR_MESSAGE = "unable to determine state for release with status '"
# Helm v4 (helm-controller v1.5+) and Helm v3 (helm-controller <= v1.4) spell it apart
NAME_IN_USE_MESSAGES = (
    "cannot reuse a name that is still in use",
    "cannot re-use a name that is still in use",
)
# status.history snapshots helm-controller v1.5+ writes and verifies; one without it (a
# "legacy" snapshot, as helm-controller <= v1.4 wrote them) is verified against nothing
SNAPSHOT_API_VERSION = "v2"
HELM_SECRET_TYPE = "helm.sh/release.v1"

# Helm statuses of a newest revision that make helm-controller's upgrade fail with
# "has no deployed releases" when no revision is deployed (reference/helm-controller-e2e.md §1.6).
BLOCKING_STATUSES = frozenset({"uninstalling", "unknown", "uninstalled"})
# Statuses of a newest revision that helm-controller's DetermineReleaseState cannot place when
# its history recorded that revision (the `default:` branch: StateError), and that deleting
# the revision repairs.  `uninstalled` is placed (Absent: install), pending-* are unlocked.
STATE_ERROR_STATUSES = frozenset({"uninstalling", "unknown"})

FENCE_RECHECK_SECONDS = 60.0
FENCE_HELD_WARN_SECONDS = 600.0

# The recovery budget (issue 57; core/budget.py): the count of recoveries in a row and what
# they were made under, written by the same PATCH as PROCESSED_ANNOTATION
BUDGET_ANNOTATION = "flux-plunger.cozystack.io/recovery-budget"
