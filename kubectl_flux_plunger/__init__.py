"""kubectl-flux-plunger: safely unstick Flux HelmReleases that report "has no deployed releases"."""

__version__ = "0.1.0"
