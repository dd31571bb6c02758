"""The chart's uninstall hook derives release-fence's flags from its Job's
activeDeadlineSeconds (real Helm renders the chart): the summary must print before the Job
is killed."""
from __future__ import annotations

import pytest

from .test_deploy_manifests import find, helm, helm_template, render_chart  # noqa: F401

HOOK = "flux-plunger-uninstall-cleanup"


def _args(docs):
    job = find(docs, "Job", HOOK)
    assert job["spec"]["activeDeadlineSeconds"]
    return job["spec"]["activeDeadlineSeconds"], job["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize(("sets", "deadline", "window"), [
    # 240 - retry window 60 - pod wait (grace 90 + 10) - two 10s request timeouts
    ((), 60, 60),
    (('uninstallCleanup={"activeDeadlineSeconds": 400}',), 220, 60),
    (('uninstallCleanup={"activeDeadlineSeconds": 200, "retryWindowSeconds": 30}',), 50, 30),
    (('uninstallCleanup={"activeDeadlineSeconds": 160, "retryWindowSeconds": 20}',
      "shutdownGracePeriodSeconds=40"), 70, 20),
])
def test_release_fence_flags_come_from_the_jobs_deadline(helm, sets, deadline, window):  # noqa: F811
    active, args = _args(render_chart(helm, "flux-plunger", *sets))
    assert args[-3:] == [f"--retry-window={window}s", f"--deadline={deadline}s",
                         "--request-timeout=10s"], args
    assert deadline + window + 20 <= active            # fits, whatever the steps before take


def test_a_deadline_too_short_for_release_fence_is_refused(helm):  # noqa: F811
    proc = helm_template(helm, "flux-plunger", 'uninstallCleanup={"activeDeadlineSeconds": 150}')
    assert proc.returncode != 0
    assert "activeDeadlineSeconds" in proc.stderr and "release-fence" in proc.stderr, proc.stderr
