"""``serve``: the same core as the one-shot verbs, run continuously by a watch loop.

* :mod:`.watch`  — sync + watch of HelmReleases as one watch-list (a paged LIST + watch
  where the server has none; bookmarks, a fresh sync on 410), the SPEC §8
  predicate, keys only (no object cache); :mod:`.sync` what one sync read;
* :mod:`.resync` — the periodic catch-all: the candidates queued again, no stream;
* :mod:`.queue`  — de-duplicating per-key work queue: serial per key, requeue-after timers,
  exponential backoff;
* :mod:`.leader` — Lease leader election (client-go semantics, released on a clean stop);
* :mod:`.drain`  — leave nothing suspended or fenced by us on shutdown;
* :mod:`.health`, :mod:`.metrics` — /healthz, /readyz, /metrics;
* :mod:`.logs`   — text or JSON log lines;
* :mod:`.options` — ``ServeConfig``, every setting as one object that checks itself, and the
  parts the pieces above take (``LeaseConfig``, ``DrainOptions``);
* :mod:`.startup` — the start-up, top to bottom: the checks that need the environment, the
  Lease's namespace, the API clients (one reading of the kubeconfig), running the controller;
* :mod:`.controller` — ``Controller``: the wiring and the shutdown sequence;
* :mod:`.startup_hints` — the releases helm-controller has just reported stuck, queued ahead of
  the sync.
"""
