"""release-fence's global deadline: a release still going when the summary is printed
starts no further write, so it cannot be released behind a "NOT released" line."""
from __future__ import annotations

import threading
import time

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.verbs import release_fence as verb
from testplane.plane import wait_for

from .conftest import hold


def _fence_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("fence")]


def test_a_release_unfinished_at_the_deadline_is_not_released_after_the_summary(plane, cluster,
                                                                                 ns):
    cluster.create_hr(ns)
    hold(cluster, ns, suspend=False)                       # live and fenced: remove the fence
    kube = plane.kube()
    held, seen = threading.Event(), []

    def hook(verb_, path):
        seen.append(verb_)
        if verb_ == "PATCH" and seen.count("PATCH") == 1:  # our guarded patch will fail its test
            cluster.merge(ns, "demo", {"metadata": {"labels": {"x": "y"}}})
        elif verb_ == "GET" and "PATCH" in seen:
            held.wait(30)                                  # the re-read outlives the deadline
    kube.before_request = hook
    try:
        results = verb.run(kube, [cluster.get(ns, "demo")], window=30,
                           deadline=time.monotonic() + 1.0)
        assert len(results) == 1 and not results[0].released, results
        assert "may still release it" in results[0].detail, results
        held.set()
        wait_for(lambda: not _fence_threads(), 30, "the release thread to end")
    finally:
        held.set()
        kube.close()
    assert seen.count("PATCH") == 1, seen                  # no write after the deadline
    assert C.FENCE in cluster.get(ns, "demo")["metadata"]["finalizers"]
