"""kubectl-flux-plunger: safely unstick Flux HelmReleases stuck for good ("has no deployed
releases", or helm-controller's StateError on an uninstalling revision)."""

__version__ = "0.1.0"
