"""Which build runs a step (`tether.deploys.routing`): new tasks by the ramp and the
promoted build, moving steps to the newest build that takes their input, pinned steps on
the build that started their task, and what a pinned step does when that build is gone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from tether.deploys.routing import Fleet, Refuse, place, ramped
from tether.schemas.builds import BuildInfo, Deployment, ToolShape
from tether.schemas.work import WorkMessage

T0 = datetime(2026, 12, 2, tzinfo=UTC)
OLD = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}
NEW = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}


def _fleet(
    pinned: bool = False, c_changes: bool = False, serving: dict[str, bool] | None = None
) -> Fleet:
    shape = ToolShape(versioning="pinned" if pinned else "moving", grace_s=30)
    v2_c = msgspec.structs.replace(shape, input_schema=NEW if c_changes else OLD)
    infos = {
        "v1": BuildInfo(
            build="v1", first_seen=T0, tools={"c": msgspec.structs.replace(shape, input_schema=OLD)}
        ),
        "v2": BuildInfo(build="v2", first_seen=T0 + timedelta(minutes=1), tools={"c": v2_c}),
    }
    builds = serving if serving is not None else {"v1": True, "v2": True}
    return Fleet(serving={"c": builds}, infos=infos)


def _work(step: int = 1, from_build: str | None = "v1", task_id: str = "t1") -> WorkMessage:
    return WorkMessage(task_id=task_id, step=step, tool="c", from_build=from_build)


def test_one_build_routes_nothing() -> None:
    fleet = _fleet(serving={"v1": True})
    assert place(fleet, _work(), "v1", T0) is None


def test_a_moving_step_goes_to_the_newest_build_unless_it_would_refuse_the_input() -> None:
    assert place(_fleet(), _work(), "v1", T0) == "v2"
    refusing = _fleet(c_changes=True)
    assert place(refusing, _work(), "v1", T0) == "v1"  # v2's c requires 'total' now
    assert place(refusing, _work(from_build="v2"), "v1", T0) == "v2"


def test_a_pinned_step_stays_on_its_build_while_a_worker_of_it_is_left() -> None:
    assert place(_fleet(pinned=True), _work(), "v1", T0) == "v1"
    draining = _fleet(pinned=True, serving={"v1": False, "v2": True})
    assert place(draining, _work(), "v1", T0) == "v1"


def test_a_pinned_step_whose_build_is_gone_waits_its_grace_then_moves_if_it_fits() -> None:
    fleet = _fleet(pinned=True, serving={"v2": True})
    fleet.gone_since[("c", "v1")] = T0
    assert place(fleet, _work(), "v1", T0 + timedelta(seconds=10)) == "v1"
    assert place(fleet, _work(), "v1", T0 + timedelta(seconds=31)) == "v2"
    refusing = _fleet(pinned=True, c_changes=True, serving={"v2": True})
    assert place(refusing, _work(), "v1", T0 + timedelta(hours=1)) == "v1"  # never onto it


def test_a_pinned_step_may_fail_its_task_once_its_build_is_gone_past_the_grace() -> None:
    fleet = _fleet(serving={"v2": True})
    fleet.infos["v1"] = msgspec.structs.replace(
        fleet.infos["v1"],
        tools={"c": ToolShape(versioning="pinned", when_gone="fail", grace_s=30)},
    )
    fleet.gone_since[("c", "v1")] = T0
    assert place(fleet, _work(), "v1", T0 + timedelta(seconds=10)) == "v1"  # may come back
    refused = place(fleet, _work(), "v1", T0 + timedelta(seconds=31))
    assert isinstance(refused, Refuse) and "tether worker --build v1" in refused.reason


def test_new_tasks_follow_the_ramp_by_task_id_and_a_promoted_build() -> None:
    fleet = _fleet()
    fleet.deployment = Deployment(current="v1", ramp="v2", percent=10)
    placed = [place(fleet, _work(0, None, f"task-{n}"), None, T0) for n in range(2000)]
    assert 170 <= placed.count("v2") <= 230
    assert placed.count("v1") == 2000 - placed.count("v2")
    assert all(
        (p == "v2") == ramped(f"task-{n}", 10) for n, p in enumerate(placed)
    )  # the same answer each time


def test_a_rolled_back_build_takes_no_new_task_and_no_moving_step() -> None:
    fleet = _fleet()
    fleet.deployment = Deployment(current="v1", retired=["v2"])
    assert place(fleet, _work(0, None), None, T0) == "v1"
    assert place(fleet, _work(), "v1", T0) == "v1"
    assert place(fleet, _work(from_build="v2"), "v2", T0) == "v1"
    fleet.deployment = Deployment(retired=["v2"])  # no build promoted: the newest but v2
    assert place(fleet, _work(0, None), None, T0) == "v1"
