"""Mint a kubeconfig for a ServiceAccount bound to exactly the given RBAC rules.

The token comes from the TokenRequest API (no kube-controller-manager needed)."""
from __future__ import annotations

from pathlib import Path


def _apply(kube, path: str, body: dict) -> dict:
    from kubectl_flux_plunger.kube import APPLY_PATCH
    return kube.request("APPLY", "PATCH", f"{path}/{body['metadata']['name']}", body=body,
                        content_type=APPLY_PATCH,
                        query={"fieldManager": "testplane", "force": "true"})


def ensure_namespace(kube, name: str) -> None:
    _apply(kube, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": name}})


def service_account_kubeconfig(plane, name: str, *, cluster_rules: list[dict] = (),
                               namespace_rules: dict[str, list[dict]] | None = None,
                               namespace: str = "default", expiration: int = 7200) -> Path:
    """Create ServiceAccount ``namespace/name``, a ClusterRole(+Binding) with
    ``cluster_rules`` and, per namespace, a Role(+Binding) with its rules; return a
    kubeconfig path that authenticates as that ServiceAccount."""
    kube = plane.kube()
    try:
        ensure_namespace(kube, namespace)
        _apply(kube, f"/api/v1/namespaces/{namespace}/serviceaccounts",
               {"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": namespace}})
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        role_name = f"test-{namespace}-{name}"
        if cluster_rules:
            _apply(kube, f"{rbac}/clusterroles", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": role_name}, "rules": list(cluster_rules)})
            _apply(kube, f"{rbac}/clusterrolebindings", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": role_name}, "subjects": subject,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": role_name}})
        for ns, rules in (namespace_rules or {}).items():
            ensure_namespace(kube, ns)
            _apply(kube, f"{rbac}/namespaces/{ns}/roles", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": role_name, "namespace": ns}, "rules": rules})
            _apply(kube, f"{rbac}/namespaces/{ns}/rolebindings", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": role_name, "namespace": ns}, "subjects": subject,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                            "name": role_name}})
        from kubectl_flux_plunger.kube import JSON
        token = kube.request("CREATE", "POST",
                             f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                             body={"apiVersion": "authentication.k8s.io/v1",
                                   "kind": "TokenRequest",
                                   "spec": {"expirationSeconds": expiration}},
                             content_type=JSON)["status"]["token"]
    finally:
        kube.close()
    path = plane.workdir / f"sa-{namespace}-{name}.kubeconfig"
    return plane.write_kubeconfig(path, f"system:serviceaccount:{namespace}:{name}",
                                  {"token": token}, namespace=namespace)
