"""No more authority than helm-controller has (SPEC §6, "Holding a release"; issue 55).

helm-controller reads and writes a HelmRelease's Helm storage as the identity it acts as for
that HelmRelease: ``spec.serviceAccountName``, else its ``--default-service-account``, as
``system:serviceaccount:<the HelmRelease's namespace>:<name>`` (helm-controller v1.6.4 and
v1.4.3, ``internal/kube/impersonate.go``); without either it acts as itself.  flux-plunger
deletes a local storage Secret only when that identity may delete Secrets in the storage
namespace: one SubjectAccessReview per identity and namespace, remembered for a while.

A release whose storage is in another cluster (``spec.kubeConfig``) needs no review: the
remote client impersonates the same identity (kube/remote.py), so the remote apiserver
itself refuses what the tenant may not do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..core import storage
from ..core.bounded import Recent
from ..core.detect import dig, has_remote_kubeconfig
from ..core.objects import Obj
from .client import Kube
from .paths import JSON

SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
SA_USER = "system:serviceaccount:{namespace}:{name}"
# how long an answer is trusted (RBAC changes take effect within it), and how many kept
TTL = 300.0
REMEMBERED = 1024


def tenant_user(hr: Obj, default_service_account: str | None) -> str | None:
    """The user helm-controller impersonates for ``hr``; None when it acts as itself."""
    name = dig(hr, "spec", "serviceAccountName")
    name = name if isinstance(name, str) and name else default_service_account
    namespace = dig(hr, "metadata", "namespace")
    if not name or not isinstance(namespace, str) or not namespace:
        return None
    return SA_USER.format(namespace=namespace, name=name)


def review(user: str, namespace: str) -> Obj:
    """The SubjectAccessReview of ``user`` deleting Secrets in ``namespace``, with the
    groups a ServiceAccount's token carries."""
    sa_namespace = user.split(":")[2]
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{sa_namespace}",
                "system:authenticated",
            ],
            "resourceAttributes": {
                "namespace": namespace,
                "verb": "delete",
                "group": "",
                "version": "v1",
                "resource": "secrets",
            },
        },
    }


class TenantAuthority:
    """``refusal(hr)``: why the tenant identity may not delete ``hr``'s storage ("" when it
    may, or when there is none).  Thread-safe; answers are kept for ``ttl`` seconds."""

    def __init__(
        self,
        kube: Kube,
        default_service_account: str | None = None,
        *,
        ttl: float = TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.default_service_account = default_service_account or None
        self.ttl, self.clock = ttl, clock
        self._lock = threading.Lock()
        self._answers: Recent[tuple[str, str], tuple[float, bool]] = Recent(REMEMBERED)

    def refusal(self, hr: Obj) -> str:
        user = tenant_user(hr, self.default_service_account)
        if user is None or has_remote_kubeconfig(hr):
            return ""
        namespace = storage.storage_namespace(hr)
        if self._allowed(user, namespace):
            return ""
        return (
            f"{user}, as whom helm-controller acts for this HelmRelease, may not delete "
            f"Secrets in namespace {namespace}"
        )

    def _allowed(self, user: str, namespace: str) -> bool:
        key, now = (user, namespace), self.clock()
        with self._lock:
            known = self._answers.get(key)
        if known is not None and now - known[0] < self.ttl:
            return known[1]
        answer = self.kube.request(
            "CREATE", "POST", SAR_PATH, body=review(user, namespace), content_type=JSON
        )
        allowed = dig(answer, "status", "allowed") is True
        with self._lock:
            self._answers.put(key, (now, allowed))
        return allowed
