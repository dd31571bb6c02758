"""kubectl-flux-plunger: safely unstick Flux HelmReleases stuck for good — the newest Helm
storage revision blocks every helm-controller action ("has no deployed releases", StateError,
"cannot reuse a name that is still in use")."""

__version__ = "0.1.0"
