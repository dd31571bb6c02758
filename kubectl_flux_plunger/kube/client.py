""":class:`Kube`, the one client every caller holds: one transport, and the resource parts
(plain objects over it) that every call is delegated to."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..core import constants as C
from ..core.objects import Obj
from .helmreleases import HelmReleases
from .official import ClientConfiguration
from .read import Reads, WatchLists
from .resources import Events, Leases, Secrets, Workloads
from .transport import Transport

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; annotations only

    from .transport import KubeOptions


class Kube(Transport):
    """A small, counted, thread-safe Kubernetes API client.

    ``dry_run`` makes every write to a HelmRelease, Secret or Event carry ``dryRun=All``
    (``--dry-run=server``); Lease writes (serve only) are never dry.
    ``before_request`` is a test hook called with (verb, path) before each request.

    Composed: it is the one :class:`~.transport.Transport` (TLS, auth, retries, the request
    counters; :mod:`.transport`), and it holds one plain object per concern, each made over
    that transport: :attr:`reads` (GET-or-none, the paged LIST, the WATCH and whether the
    server serves watch-lists; :mod:`.read`), :attr:`helmreleases` (:mod:`.helmreleases`),
    :attr:`secrets`, :attr:`events`, :attr:`leases` and :attr:`workloads`
    (:mod:`.resources`).  The parts send through this object, so a subclass that changes how
    a request is sent (:class:`~.remote.RemoteKube`) changes it for every part.  The methods
    below keep the flat API callers and test fakes use (``kube.list_cluster_leases()``):
    each is one line handing the call to its part.
    """

    def __init__(self, configuration: ClientConfiguration, **options: Unpack[KubeOptions]):
        super().__init__(configuration, **options)
        self.reads = Reads(self, configuration)
        self.helmreleases = HelmReleases(self, self.reads)
        self.secrets = Secrets(self)
        self.events = Events(self, self.reads)
        self.leases = Leases(self, self.reads)
        self.workloads = Workloads(self, self.reads)

    # -- whether this server serves watch-lists (the reads) -----------------------------

    @property
    def watch_list(self) -> bool:
        """See :attr:`.read.Reads.watch_list`."""
        return self.reads.watch_list

    @watch_list.setter
    def watch_list(self, value: bool) -> None:
        self.reads.watch_list = value

    @property
    def watch_lists(self) -> WatchLists:
        """Watch-lists in a row that gave no state, and the pause a run of them starts."""
        return self.reads.watch_lists

    # -- HelmReleases ---------------------------------------------------------------------

    def get_hr(self, namespace: str, name: str) -> Obj | None:
        return self.helmreleases.get_hr(namespace, name)

    def list_hrs(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> list[Obj]:
        return self.helmreleases.list_hrs(namespace, label_selector)

    def iter_hr_pages(
        self, namespace: str | None = None, label_selector: str | None = None, limit: int = 500
    ) -> Iterator[tuple[list[Obj], str]]:
        return self.helmreleases.iter_hr_pages(namespace, label_selector, limit)

    def watch_hrs(
        self,
        namespace: str | None,
        label_selector: str | None,
        resource_version: str,
        timeout_seconds: int = 300,
        field_selector: str | None = None,
        opened: Callable[[Any], None] | None = None,
        send_initial_events: bool = False,
    ) -> Iterator[Obj]:
        return self.helmreleases.watch_hrs(
            namespace,
            label_selector,
            resource_version,
            timeout_seconds=timeout_seconds,
            field_selector=field_selector,
            opened=opened,
            send_initial_events=send_initial_events,
        )

    def apply_hr(self, body: Obj, *, force: bool = False) -> Obj:
        return self.helmreleases.apply_hr(body, force=force)

    def merge_patch_hr(
        self, namespace: str, name: str, patch: Obj, *, field_manager: str = C.CLIENT_SIDE_MANAGER
    ) -> Obj:
        return self.helmreleases.merge_patch_hr(namespace, name, patch, field_manager=field_manager)

    def json_patch_hr(
        self, namespace: str, name: str, ops: list[Obj], *, field_manager: str = C.FIELD_MANAGER
    ) -> Obj:
        return self.helmreleases.json_patch_hr(namespace, name, ops, field_manager=field_manager)

    def hr_api_served(self) -> bool:
        return self.helmreleases.hr_api_served()

    # -- Helm storage Secrets -------------------------------------------------------------

    def list_secrets(self, namespace: str, label_selector: str) -> list[Obj]:
        return self.secrets.list_secrets(namespace, label_selector)

    def delete_secret(
        self, namespace: str, name: str, uid: str, resource_version: str | None = None
    ) -> Obj:
        return self.secrets.delete_secret(namespace, name, uid, resource_version)

    # -- Events ---------------------------------------------------------------------------

    def get_event(self, namespace: str, name: str) -> Obj | None:
        return self.events.get_event(namespace, name)

    def iter_events(
        self, namespace: str | None, field_selector: str, limit: int = 500
    ) -> Iterator[Obj]:
        return self.events.iter_events(namespace, field_selector, limit)

    def create_event(self, namespace: str, body: Obj) -> Obj:
        return self.events.create_event(namespace, body)

    def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        return self.events.patch_event(namespace, name, patch)

    # -- Leases ---------------------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        return self.leases.get_lease(namespace, name)

    def list_leases(self, namespace: str) -> list[Obj]:
        return self.leases.list_leases(namespace)

    def list_cluster_leases(self) -> list[Obj]:
        return self.leases.list_cluster_leases()

    def create_lease(self, namespace: str, body: Obj) -> Obj:
        return self.leases.create_lease(namespace, body)

    def update_lease(self, namespace: str, name: str, body: Obj) -> Obj:
        return self.leases.update_lease(namespace, name, body)

    # -- the controller's Deployment and Pods, discovery ----------------------------------

    def get_deployment(self, namespace: str, name: str) -> Obj | None:
        return self.workloads.get_deployment(namespace, name)

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> Obj:
        return self.workloads.scale_deployment(namespace, name, replicas)

    def list_pods(self, namespace: str, label_selector: str) -> list[Obj]:
        return self.workloads.list_pods(namespace, label_selector)

    def server_version(self) -> Obj:
        return self.workloads.server_version()

    def list_deployments_any(self, label_selector: str) -> list[Obj]:
        return self.workloads.list_deployments_any(label_selector)
