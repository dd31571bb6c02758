""":class:`Kube`, the one client every caller holds: the resource helpers over the reads over
the transport."""

from __future__ import annotations

from .helmreleases import HelmReleases
from .resources import Events, Leases, Secrets, Workloads


class Kube(HelmReleases, Secrets, Events, Leases, Workloads):
    """A small, counted, thread-safe Kubernetes API client.

    ``dry_run`` makes every write to a HelmRelease, Secret or Event carry ``dryRun=All``
    (``--dry-run=server``); Lease writes (serve only) are never dry.
    ``before_request`` is a test hook called with (verb, path) before each request.

    Made of one part per concern (each its own module in this package): the resource
    helpers (:mod:`.helmreleases`, :mod:`.resources`) over the reads (:mod:`.read`: GET,
    paged LIST, WATCH and the watch-list) over the one module every request goes through
    (:mod:`.transport`: TLS, auth, retries, the request counters).
    """
