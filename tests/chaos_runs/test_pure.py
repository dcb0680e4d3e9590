"""The chaos runs' pure parts: re-run detection, stalls, the cluster configs' rewrite."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from tests.chaos_runs import executions, stalls, tasks
from tests.chaos_runs.executions import Execution
from tests.chaos_runs.servers import CLUSTER_CONFS, Cluster
from tether import TaskRecord, TaskStatus


def _run(task: str, step: int, started: float, branch: int | None = None) -> Execution:
    return Execution(task, step, branch, attempt=1, pid=1, started=started)


def test_an_execution_after_its_checkpoint_is_a_rerun() -> None:
    ran = [_run("a", 0, 1.0), _run("a", 0, 5.0), _run("a", 1, 2.0, branch=0)]
    stored = {("a", 0, None): 3.0, ("a", 1, 0): 4.0}
    assert executions.checkpointed_reruns(ran, stored) == [ran[1]]


def test_runs_of_a_step_that_never_checkpointed_are_only_repeats() -> None:
    ran = [_run("a", 0, 1.0), _run("a", 0, 2.0), _run("b", 0, 1.0), _run("b", 0, 2.0)]
    assert executions.checkpointed_reruns(ran, {}) == []
    assert executions.repeats(ran, {("b", 0, None): 2}) == {("a", 0, None): 1}


def test_a_line_cut_short_by_a_kill_is_skipped(tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    log.write_text("t 0 1 42 10.5\nt 1.b2 3 42 11.0\nt 2 1 4")
    assert executions.read(log) == [
        Execution("t", 0, None, 1, 42, 10.5),
        Execution("t", 1, 2, 3, 42, 11.0),
    ]


def test_the_index_agrees_when_each_task_has_one_row_under_its_records_status() -> None:
    now = datetime.now(UTC)
    done = TaskRecord(
        task_id="a", status=TaskStatus.COMPLETED, steps=[], created_at=now, updated_at=now
    )
    records: dict[str, TaskRecord | None] = {"a": done, "b": done, "c": done, "d": None}
    rows = ["t.index.completed.0000000000000001.a", "t.index.running.0000000000000002.b"]
    rows += ["t.index.completed.0000000000000002.b", "t.index.running.0000000000000009.other"]
    assert tasks.index_disagreements(rows, records) == {"b": "completed, running", "c": "no row"}


def test_the_stall_is_the_longest_gap_around_the_kill() -> None:
    times = [0.0, 1.0, 2.0, 9.0, 9.5, 10.0, 30.0]
    kill = stalls.Kill("n1", "leader", killed_at=2.5, restarted_at=5.0, healthy_at=6.0)
    stall = stalls.stall(times, kill)
    assert stall.longest_gap == 7.0  # 2.0 -> 9.0 spans the kill
    assert stall.first_after == 6.5
    assert stall.completed == 3  # up to healthy + SETTLE = 16.0


def test_no_completion_after_the_kill() -> None:
    kill = stalls.Kill("n1", "follower", killed_at=5.0, restarted_at=6.0, healthy_at=7.0)
    assert stalls.stall([1.0, 2.0], kill).first_after is None


def test_the_baseline_skips_the_start() -> None:
    times = [0.0, 5.0, *(5.0 + 0.1 * i for i in range(1, 20))]
    assert round(stalls.baseline(times, before=100.0, skip=2), 3) == 0.1


def test_the_cluster_configs_move_onto_loopback(tmp_path: Path) -> None:
    cluster = Cluster.from_deploy(tmp_path)
    assert [n.name for n in cluster.nodes] == ["nats-1", "nats-2", "nats-3"]
    assert len(CLUSTER_CONFS) == 3
    for node in cluster.nodes:
        text = node.conf.read_text()
        assert f"listen: 127.0.0.1:{node.client_port}" in text
        assert f"http_port: {node.http_port}" in text
        assert str(tmp_path / node.name / "data") in text
        assert "nats-route://nats-" not in text and "0.0.0.0" not in text
        assert text.count("nats-route://127.0.0.1:") == 3
