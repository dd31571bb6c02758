"""serve's Lease renewals against the real kube-apiserver (issue 58): each PUT asks for the
answer as protobuf ``PartialObjectMetadata`` and leaves ``managedFields`` out of its body —
the apiserver answers in protobuf, keeps the Lease's managed fields and its annotations, and
what the elector holds as written is what the apiserver stores."""
from __future__ import annotations

import threading

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.kube import protobuf
from kubectl_flux_plunger.serve.leader import LeaderElector
from kubectl_flux_plunger.serve.options import LeaseConfig, LeaseTimings
from testplane.cluster import eventually

ANNOTATIONS = {C.LEASE_SELECTOR_ANNOTATION: "shard=a", C.LEASE_NAMESPACE_ANNOTATION: ""}


def _lead(kube, ns):
    elector = LeaderElector(kube, LeaseConfig(ns, "renewed", "me_1", LeaseTimings(3, 2, 0.2),
                                              ANNOTATIONS))
    stop = threading.Event()
    thread = threading.Thread(target=elector.run, args=(stop,), daemon=True)
    thread.start()
    eventually(elector.is_leader, 20, "leading")
    return elector, stop, thread


def test_renewals_are_answered_in_protobuf_and_keep_what_the_lease_holds(kube, ns, monkeypatch):
    decoded = []
    real = protobuf.partial_object_metadata

    def counted(payload):
        decoded.append(len(payload))
        return real(payload)

    monkeypatch.setattr(protobuf, "partial_object_metadata", counted)
    elector, stop, thread = _lead(kube, ns)
    eventually(lambda: len(decoded) >= 5, 20, "five renewals answered in protobuf")
    elector.stop_renewing()
    thread.join(10)
    stop.set()
    stored = kube.get_lease(ns, "renewed")
    held = elector._observed
    # what the elector holds as written is what the apiserver stores, but managedFields
    assert held["metadata"] == {k: v for k, v in stored["metadata"].items()
                                if k != "managedFields"}
    assert held["spec"] == stored["spec"]
    assert stored["spec"]["holderIdentity"] == "me_1"
    # the annotations written at the acquire stay through every renewal
    assert stored["metadata"]["annotations"] == ANNOTATIONS
    # and the managed fields the bodies left out are kept: one entry, our renewals'
    managed = stored["metadata"]["managedFields"]
    assert [(m["manager"], m["operation"]) for m in managed] == [("kubectl-flux-plunger", "Update")]
    assert set(managed[0]["fieldsV1"]["f:spec"]) >= {"f:holderIdentity", "f:renewTime"}
    assert "managedFields" not in held["metadata"]
    # every answer was metadata only: smaller than the Lease itself
    assert max(decoded) < 700


def test_a_renewal_after_another_writer_conflicts_and_renews_from_a_fresh_read(kube, ns):
    elector, stop, thread = _lead(kube, ns)
    try:
        lease = kube.get_lease(ns, "renewed")
        kube.update_lease(ns, "renewed", {**lease, "metadata": {
            **lease["metadata"],
            "annotations": {**lease["metadata"]["annotations"], "someone/else": "was here"}}})
        before = kube.get_lease(ns, "renewed")["spec"]["renewTime"]
        eventually(lambda: kube.get_lease(ns, "renewed")["spec"]["renewTime"] != before, 10,
                   "renewed again after the other write")
        assert elector.is_leader()
        stored = kube.get_lease(ns, "renewed")
        assert stored["metadata"]["annotations"]["someone/else"] == "was here"
        assert elector._observed["metadata"]["annotations"]["someone/else"] == "was here"
    finally:
        elector.stop_renewing()
        thread.join(10)
        stop.set()
