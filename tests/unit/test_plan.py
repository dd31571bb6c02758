"""The SPEC §6 decision table and the watch predicate."""

from __future__ import annotations


import pytest

from kubectl_flux_plunger.core import constants, plan
from kubectl_flux_plunger.core.plan import Action, Decision, EventSpec, decide, predicate

from .builders import CLIENT_SIDE, NOW, OURS, hr, ready_condition, stuck_condition

pytestmark = pytest.mark.unit

FENCE = constants.FENCE
HC = constants.HELM_CONTROLLER_FINALIZER
PROCESSED = {constants.PROCESSED_ANNOTATION: "3"}
DELETED_1M_AGO = "2026-11-29T19:59:00Z"
DELETED_10M_AGO = "2026-11-29T19:50:00Z"
FOREIGN = ("velero", "Update", True)
REMOTE = {"kubeConfig": {"secretRef": {"name": "remote"}}}
STUCK = [stuck_condition()]


def row(release: dict | None) -> tuple[Action, str, EventSpec | None, float | None]:
    decision = decide(release, NOW)
    return decision.action, decision.row, decision.event, decision.requeue_after


ROWS = [
    pytest.param(None, Action.NOTHING, "gone", None, None, id="gone"),
    pytest.param(
        hr(suspend=True, managed=[OURS], finalizers=[HC, FENCE],
           deletion_timestamp=DELETED_1M_AGO),
        Action.RELINQUISH, "terminating-suspended-owned", None, None,
        id="terminating-suspended-owned"),
    pytest.param(
        hr(suspend=True, managed=[FOREIGN], finalizers=[HC, FENCE],
           deletion_timestamp=DELETED_1M_AGO),
        Action.REMOVE_FENCE, "terminating-suspended-foreign", plan.TERMINATING_WHILE_SUSPENDED,
        None, id="terminating-suspended-foreign-fenced"),
    pytest.param(
        hr(suspend=True, managed=[FOREIGN], finalizers=[HC], deletion_timestamp=DELETED_1M_AGO,
           annotations=PROCESSED),
        Action.NOTHING, "terminating-suspended-foreign",
        plan.TERMINATING_WHILE_SUSPENDED_AFTER_RECOVERY, None,
        id="terminating-suspended-foreign-unfenced-recovered"),
    pytest.param(
        hr(finalizers=[FENCE], generation=4, observed_generation=4,
           deletion_timestamp=DELETED_1M_AGO),
        Action.REMOVE_FENCE, "terminating-fenced-uninstalled", None, None,
        id="terminating-fenced-uninstalled"),
    pytest.param(
        hr(finalizers=[HC, FENCE], generation=4, observed_generation=4,
           deletion_timestamp=DELETED_1M_AGO),
        Action.WAIT_FENCE, "terminating-fenced-waiting", None, constants.FENCE_RECHECK_SECONDS,
        id="terminating-fenced-waiting"),
    pytest.param(
        hr(finalizers=[FENCE], generation=4, observed_generation=3,
           deletion_timestamp=DELETED_10M_AGO),
        Action.WAIT_FENCE, "terminating-fenced-waiting", plan.UNINSTALL_FENCE_HELD,
        constants.FENCE_RECHECK_SECONDS, id="terminating-fenced-waiting-warns"),
    pytest.param(
        hr(finalizers=[HC], deletion_timestamp=DELETED_1M_AGO, conditions=STUCK),
        Action.NOTHING, "terminating-unfenced", None, None, id="terminating-unfenced"),
    pytest.param(
        hr(suspend=True, managed=[FOREIGN], conditions=STUCK),
        Action.NOTHING, "live-suspended-foreign", plan.SUSPENSION_NOT_OWNED, None,
        id="live-suspended-foreign"),
    pytest.param(
        hr(suspend=True, managed=[FOREIGN], finalizers=[FENCE], annotations=PROCESSED),
        Action.REMOVE_FENCE, "live-suspended-foreign", plan.SUSPENSION_NOT_OWNED_AFTER_RECOVERY,
        None, id="live-suspended-foreign-fenced-recovered"),
    pytest.param(
        hr(suspend=True, managed=[OURS], finalizers=[FENCE], conditions=STUCK),
        Action.RELINQUISH, "live-suspended-owned", None, None, id="live-suspended-owned"),
    pytest.param(
        hr(suspend=False, finalizers=[FENCE], conditions=STUCK),
        Action.REMOVE_FENCE, "live-fenced", None, None, id="live-fenced"),
    pytest.param(
        hr(conditions=STUCK, spec_extra=REMOTE),
        Action.RECOVER, "live-stuck", None, None, id="remote-stuck"),
    pytest.param(
        hr(suspend=False, conditions=STUCK),
        Action.RECOVER, "live-stuck", None, None, id="live-stuck"),
    pytest.param(
        hr(conditions=[ready_condition()]),
        Action.NOTHING, "healthy", None, None, id="healthy"),
]


@pytest.mark.parametrize(("release", "action", "row_id", "event", "requeue"), ROWS)
def test_decision_table_row(release: dict | None, action: Action, row_id: str,
                            event: EventSpec | None, requeue: float | None) -> None:
    assert row(release) == (action, row_id, event, requeue)


def test_every_row_id_is_covered() -> None:
    covered = {param.values[2] for param in ROWS}
    assert covered == set(plan.Row)      # derived from the closed enum: a new row needs a case
    for param in ROWS:
        assert isinstance(decide(param.values[0], NOW).row, plan.Row)


def test_no_row_or_result_literal_outside_the_enums() -> None:
    """Every row / result is spelled once, in its enum (`plan.Row`, `executor.Result`): the
    rest of the package (core, executor, verbs, cli, serve) compares enum members only."""
    import re
    from pathlib import Path

    from kubectl_flux_plunger.executor import Result

    root = Path(plan.__file__).parent.parent  # the package
    words = {m.value for m in plan.Row} | {m.value for m in Result}
    literal = re.compile(r"""["'](%s)["']""" % "|".join(re.escape(w) for w in sorted(words)))
    defining = {root / "core" / "plan.py", root / "executor" / "outcome.py"}
    # the same word with another meaning, not a row or result
    other_meaning = {
        root / "core" / "storage.py": {"failed"},               # Helm's own release status
        root / "core" / "payload.py": {"failed"},               # the same
        root / "verbs" / "status.py": {"healthy"},     # status's SPEC §2 state vocabulary
        root / "cli" / "render.py": {"failed"},        # RecoveryResult's `failed` field
    }
    checked = sorted(set(root.rglob("*.py")) - defining)
    assert root / "cli" / "__init__.py" in checked and root / "serve" / "controller.py" in checked
    found = []
    for path in checked:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in literal.finditer(line):
                if m.group(1) not in other_meaning.get(path, set()):
                    found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_design_doc_lists_every_row_and_result() -> None:
    """docs/DESIGN.md's two reference tables name exactly the members of the enums."""
    import re
    from pathlib import Path

    from kubectl_flux_plunger.executor import Result

    doc = (Path(plan.__file__).parents[2] / "docs" / "DESIGN.md").read_text()
    section = doc.split("### Rows and results", 1)[1].split("\n#", 1)[0]

    def first_column(header: str) -> list[str]:
        table = section.split(header, 1)[1].split("\n\n", 1)[0]
        return re.findall(r"^\| `([a-z-]+)` \|", table, flags=re.M)

    rows = first_column("| row (`plan.Row`)")
    results = first_column("| result (`executor.Result`)")
    assert rows == [m.value for m in plan.Row]          # every row once, in the enum's order
    assert results == [m.value for m in Result]


def test_decisions_carry_a_one_line_reason() -> None:
    for param in ROWS:
        decision = decide(param.values[0], NOW)
        assert isinstance(decision, Decision)
        assert decision.reason and "\n" not in decision.reason


@pytest.mark.parametrize(
    "managed",
    [
        pytest.param([(constants.FIELD_MANAGER, "Update", True)], id="our-update-not-apply"),
        pytest.param([CLIENT_SIDE], id="flux-client-side-apply"),
        pytest.param([(constants.FIELD_MANAGER, "Apply", False)], id="our-apply-without-suspend"),
    ],
)
def test_suspension_without_apply_ownership_is_foreign(managed: list) -> None:
    live = hr(suspend=True, managed=managed, finalizers=[FENCE], conditions=STUCK)
    assert row(live)[:2] == (Action.REMOVE_FENCE, "live-suspended-foreign")
    dying = hr(suspend=True, managed=managed, deletion_timestamp=DELETED_1M_AGO)
    assert row(dying)[:2] == (Action.NOTHING, "terminating-suspended-foreign")


def test_malformed_managed_fields_count_as_foreign() -> None:
    release = hr(suspend=True, conditions=STUCK)
    release["metadata"]["managedFields"] = [{"manager": constants.FIELD_MANAGER,
                                             "operation": "Apply", "fieldsV1": "garbage"}]
    assert row(release)[:2] == (Action.NOTHING, "live-suspended-foreign")


def test_fence_warning_threshold_is_inclusive_and_configurable() -> None:
    release = hr(finalizers=[FENCE, HC], deletion_timestamp=DELETED_10M_AGO)
    assert decide(release, NOW, fence_warn_after=600.0).event == plan.UNINSTALL_FENCE_HELD
    assert decide(release, NOW, fence_warn_after=600.5).event is None
    assert decide(release, NOW, fence_recheck=5.0).requeue_after == 5.0


def test_unparsable_deletion_timestamp_waits_without_warning() -> None:
    release = hr(finalizers=[FENCE, HC], deletion_timestamp="soon")
    assert row(release) == (Action.WAIT_FENCE, "terminating-fenced-waiting", None,
                            constants.FENCE_RECHECK_SECONDS)


def test_fence_takes_precedence_over_remote_and_stuck() -> None:
    release = hr(finalizers=[FENCE], conditions=STUCK, spec_extra=REMOTE)
    assert row(release)[:2] == (Action.REMOVE_FENCE, "live-fenced")


def test_owned_suspension_of_remote_release_is_still_lifted() -> None:
    release = hr(suspend=True, managed=[OURS], conditions=STUCK, spec_extra=REMOTE)
    assert row(release)[:2] == (Action.RELINQUISH, "live-suspended-owned")


def test_terminating_owned_suspension_relinquishes_even_when_co_owned() -> None:
    release = hr(suspend=True, managed=[OURS, FOREIGN], finalizers=[FENCE],
                 deletion_timestamp=DELETED_1M_AGO)
    assert row(release)[:2] == (Action.RELINQUISH, "terminating-suspended-owned")


def test_suspend_false_but_owned_field_is_not_suspended() -> None:
    release = hr(suspend=False, managed=[OURS], conditions=STUCK)
    assert row(release)[:2] == (Action.RECOVER, "live-stuck")


def test_event_messages_are_static_and_typed() -> None:
    specs = [value for value in vars(plan).values() if isinstance(value, EventSpec)]
    assert {spec.reason for spec in specs} == {
        "SuspensionNotOwned", "TerminatingWhileSuspended", "UninstallFenceHeld",
        "UnsuspendFailed", "RecoveryDeferred", "Recovered", "RecoveryFailed",
    }
    for spec in specs:
        assert spec.type in ("Normal", "Warning")
        assert "{" not in spec.message and not any(ch.isdigit() for ch in spec.message)
    assert plan.RECOVERY_DEFERRED.type == "Normal"
    assert plan.UNSUSPEND_FAILED.type == "Warning"
    assert plan.UNINSTALL_FENCE_HELD.type == "Warning"


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        pytest.param(hr(conditions=STUCK), True, id="stuck"),
        pytest.param(hr(suspend=True, managed=[OURS]), True, id="suspended-owned"),
        pytest.param(hr(finalizers=[FENCE]), True, id="fenced"),
        pytest.param(hr(suspend=True, managed=[FOREIGN], deletion_timestamp=DELETED_1M_AGO), True,
                     id="suspended-terminating"),
        pytest.param(hr(suspend=True, managed=[FOREIGN]), False, id="foreign-suspension-live"),
        pytest.param(hr(suspend=False, managed=[OURS]), False, id="owned-marker-not-suspended"),
        pytest.param(hr(finalizers=[HC], deletion_timestamp=DELETED_1M_AGO), False,
                     id="terminating-unfenced-unsuspended"),
        pytest.param(hr(conditions=[ready_condition()]), False, id="healthy"),
    ],
)
def test_predicate(release: dict, expected: bool) -> None:
    assert predicate(release) is expected


MID_ACTION = [{"type": "Ready", "status": "Unknown", "reason": "Progressing",
               "message": "Running 'upgrade' action with timeout of 5m0s"},
              dict(stuck_condition(), type="Released")]


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        pytest.param(hr(conditions=STUCK), True, id="stuck"),
        pytest.param(hr(conditions=[ready_condition()]), False, id="healthy"),
        # helm-controller mid-action: stuck for status and the LIST, not worth a pass on
        # the event — the action ends with Ready True or False
        pytest.param(hr(conditions=MID_ACTION), False, id="ready-unknown"),
        # recovered, helm-controller has not attempted the new generation yet
        pytest.param(hr(conditions=STUCK, annotations=PROCESSED, generation=3,
                        last_attempted_generation=2), False, id="awaiting-retry"),
        # ... and once it has, still stuck: a second recovery may be due
        pytest.param(hr(conditions=[stuck_condition(observed_generation=3)],
                        annotations=PROCESSED, generation=3, last_attempted_generation=3),
                     True, id="stuck-again-after-retry"),
        # ours to lift, fences to drop, Events to record: always wanted
        pytest.param(hr(suspend=True, managed=[OURS], conditions=STUCK, annotations=PROCESSED,
                        generation=3, last_attempted_generation=2), True,
                     id="suspended-owned-awaiting"),
        pytest.param(hr(finalizers=[FENCE], conditions=MID_ACTION), True, id="fenced-mid-action"),
        pytest.param(hr(suspend=True, managed=[FOREIGN], conditions=MID_ACTION), True,
                     id="foreign-suspension-mid-action"),
        pytest.param(hr(suspend=True, managed=[FOREIGN]), False, id="foreign-suspension-live"),
        pytest.param(hr(suspend=True, managed=[FOREIGN], conditions=STUCK), True,
                     id="foreign-suspension-stuck"),
    ],
)
def test_a_watch_event_is_wanted_when_no_later_write_of_helm_controllers_follows(
        release: dict, expected: bool) -> None:
    assert plan.wanted_on_change(release) is expected
    if expected:
        assert predicate(release)   # a narrowing of the predicate, never a widening
