"""The pure core: what flux-plunger decides, with no API client.

The decision table (``plan``), the stuck-release detection (``detect``), the Helm storage
verdict (``storage``), who owns ``spec.suspend`` (``ownership``), the bodies of every write
(``writes``), label selectors and watch scopes (``selector``, ``scope``), and the shared
names (``objects``, ``constants``).  Nothing here imports ``kube`` or the kubernetes client
(an import contract in pyproject.toml keeps it so): every function takes objects already
read and returns a decision, so the unit tier tests all of it without a cluster."""
