"""Points one job measures each in a fresh process: the record comes back, the time limit kills, and
only a record of the same identity, written by membench, is reused."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from membench.core import atomic
from membench.core.checkpoint import run_identity
from membench.core.errors import InputError
from membench.core.points import Command, Fork, Point, is_measured, measure, measure_many


def _write(path, value):
    atomic.write_json(path, {"value": value, "pid": os.getpid()})


def _point(tmp_path, batch=4):
    return Point(tmp_path / "p.json", run_identity({"batch": batch}, code="v1"))


def test_a_forked_point_writes_its_record_in_another_process_and_is_then_measured(tmp_path):
    point = _point(tmp_path)
    assert not is_measured(point)
    outcome = measure(point, Fork(_write, (point.record, 1.5)))
    assert outcome.record["value"] == 1.5 and outcome.record["pid"] != os.getpid()
    assert outcome.exit_code == 0 and not outcome.timed_out and outcome.wall_s > 0
    assert is_measured(point)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["p.json"]  # the identity stays out of sight


def test_a_command_point_runs_a_fresh_interpreter(tmp_path):
    point = _point(tmp_path)
    code = f"from membench.core import atomic; atomic.write_json({str(point.record)!r}, {{'value': 2}})"
    outcome = measure(point, Command([sys.executable, "-c", code]))
    assert outcome.record == {"value": 2} and outcome.exit_code == 0 and is_measured(point)


def test_the_identity_is_written_before_the_process_starts(tmp_path):
    point = _point(tmp_path)
    outcome = measure(point, Fork(_write, (point.record, None)))
    assert outcome.record is not None
    assert json.loads(point.identity_path.read_text()) == point.identity
    assert point.identity_path.stat().st_mtime_ns <= point.record.stat().st_mtime_ns


def test_a_point_of_another_identity_is_measured_again(tmp_path, caplog):
    measure(_point(tmp_path, batch=4), Fork(_write, (tmp_path / "p.json", 1)))
    other = _point(tmp_path, batch=8)
    assert (
        not is_measured(other) and "not resumed, the run starts over: options changed: batch" in caplog.text
    )
    assert measure(other, Fork(_write, (other.record, 2))).record["value"] == 2
    assert is_measured(other) and not is_measured(_point(tmp_path, batch=4))


def _exit(code):
    os._exit(code)


def test_a_process_that_writes_no_record_gives_none_with_its_exit_code(tmp_path):
    outcome = measure(_point(tmp_path), Fork(_exit, (3,)))
    assert outcome.record is None and outcome.exit_code == 3 and not outcome.timed_out
    assert not is_measured(_point(tmp_path))


def test_a_point_past_its_time_limit_is_killed(tmp_path):
    point = _point(tmp_path)
    begin = time.monotonic()
    outcome = measure(point, Command([sys.executable, "-c", "import time; time.sleep(60)"]), timeout_s=0.5)
    assert outcome.timed_out and outcome.record is None and outcome.exit_code == -9
    assert time.monotonic() - begin < 30
    outcome = measure(point, Fork(time.sleep, (60,)), timeout_s=0.5)
    assert outcome.timed_out and outcome.exit_code == -9


def test_a_file_membench_did_not_write_is_refused_untouched(tmp_path):
    point = _point(tmp_path)
    point.record.write_text('{"mine": true}')
    assert not is_measured(point)
    with pytest.raises(InputError, match="not written by membench"):
        measure(point, Fork(_write, (point.record, 1)))
    assert point.record.read_text() == '{"mine": true}' and not point.identity_path.exists()


def test_a_record_changed_since_membench_wrote_it_is_not_reused(tmp_path):
    point = _point(tmp_path)
    measure(point, Fork(_write, (point.record, 1)))
    point.record.write_text('{"value": 1000}')
    assert not is_measured(point)
    with pytest.raises(InputError, match="was changed since"):
        measure(point, Fork(_write, (point.record, 1)))


def _span(path, seconds):
    """Record when this process ran: [start, end] on the monotonic clock, shared by every process."""
    begin = time.monotonic()
    time.sleep(seconds)
    atomic.write_json(path, {"span": [begin, time.monotonic()]})


def test_many_points_run_at_most_at_once_side_by_side_and_each_comes_back(tmp_path):
    points = [Point(tmp_path / f"p{i}.json", run_identity({"i": i}, code="v1")) for i in range(5)]
    outcomes = {
        p.record.name: o
        for p, o in measure_many([(p, Fork(_span, (p.record, 0.4))) for p in points], at_once=2)
    }
    assert sorted(outcomes) == [f"p{i}.json" for i in range(5)]
    assert all(is_measured(p) for p in points)
    spans = [o.record["span"] for o in outcomes.values()]
    # The most processes alive at one moment: at some process's start, those whose span covers it.
    crowd = max(sum(s[0] <= start < s[1] for s in spans) for start, _ in spans)
    assert crowd == 2


def test_a_point_past_its_limit_is_killed_while_its_neighbours_finish(tmp_path):
    slow, quick = (
        Point(tmp_path / f"{n}.json", run_identity({"n": n}, code="v1")) for n in ("slow", "quick")
    )
    outcomes = {
        p.record.stem: o
        for p, o in measure_many(
            [(slow, Fork(time.sleep, (60,))), (quick, Fork(_span, (quick.record, 0)))], 2.0, at_once=2
        )
    }
    assert outcomes["slow"].timed_out and outcomes["slow"].exit_code == -9
    assert not outcomes["quick"].timed_out and outcomes["quick"].record is not None


def test_stopping_early_kills_the_points_still_running(tmp_path):
    points = [Point(tmp_path / f"p{i}.json", run_identity({"i": i}, code="v1")) for i in range(3)]
    starts = [
        (points[0], Fork(_span, (points[0].record, 0))),
        *((p, Command([sys.executable, "-c", "import time; time.sleep(60)"])) for p in points[1:]),
    ]
    begin = time.monotonic()
    outcomes = measure_many(starts, at_once=3)
    first, _ = next(outcomes)
    outcomes.close()  # the caller stops (an error, an interrupt): the two sleepers must not live on
    assert first == points[0] and time.monotonic() - begin < 30
    assert not any(p.record.exists() for p in points[1:])


def test_at_once_below_one_is_refused():
    with pytest.raises(ValueError, match="at_once must be at least 1, got 0"):
        list(measure_many([], at_once=0))
