"""The one-shot verbs.  Each takes a connected :class:`~kubectl_flux_plunger.kube.Kube`
and plain options, and returns data for the CLI to render; none of them prints."""
