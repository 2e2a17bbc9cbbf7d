"""The timing helper's statistics and flags, exactly, on hand-made samples."""

import pytest
import torch

from membench.core import timing
from membench.core.timing import LOAD_RATIO_MAX, SPREAD_PCT_MAX, Timer, steady_median, timing_fields


def test_one_sample_is_kept_and_flagged():
    fields = timing_fields([8.0], "epoch", [0.5], threads=2, cpu_count=2)
    assert fields == {
        "time_unit": "epoch",
        "time_median_s": 8.0,
        "time_spread_pct": None,
        "time_min_s": 8.0,
        "time_max_s": 8.0,
        "time_samples": 1,
        "load_1m_max": 0.5,
        "cpu_count": 2,
        "timing_reliable": False,
        "timing_flag": "1 sample",
    }


def test_two_samples_drop_the_first_and_leave_one():
    fields = timing_fields([8.0, 2.0], "epoch", [0.5], threads=2, cpu_count=2)
    assert fields["time_median_s"] == 2.0 and fields["time_samples"] == 1
    assert fields["timing_flag"] == "1 sample" and not fields["timing_reliable"]


def test_steady_samples_exclude_the_warm_up_sample():
    # HotConv's case: an 8 s first epoch must not be the epoch time.
    fields = timing_fields([8.0, 2.0, 2.2, 2.1], "epoch", [1.0], threads=2, cpu_count=2)
    assert fields["time_median_s"] == pytest.approx(2.1)
    assert fields["time_spread_pct"] == pytest.approx(0.2 / 2.1 * 100)
    assert fields["time_samples"] == 3 and (fields["time_min_s"], fields["time_max_s"]) == (2.0, 2.2)
    assert fields["timing_reliable"] and fields["timing_flag"] == ""


def test_a_spread_outlier_is_flagged():
    # DIVISION vanilla's case: epochs from 2.1 to 84 s.
    fields = timing_fields([3.0, 2.1, 2.2, 84.0], "epoch", [1.0], threads=1, cpu_count=2)
    assert fields["time_median_s"] == pytest.approx(2.2)
    assert fields["time_spread_pct"] == pytest.approx((84.0 - 2.1) / 2.2 * 100)
    assert fields["timing_flag"] == f"spread {(84.0 - 2.1) / 2.2 * 100:.0f}% > {SPREAD_PCT_MAX:.0f}%"
    assert not fields["timing_reliable"]


def test_high_load_is_flagged_but_the_jobs_own_threads_are_not():
    samples = [1.0, 1.0, 1.0, 1.0]
    assert timing_fields(samples, "step", [2.0], threads=2, cpu_count=2)["timing_reliable"]
    assert timing_fields(samples, "step", [4.0], threads=4, cpu_count=2)["timing_reliable"]
    assert timing_fields(samples, "step", [4.0], threads=4, cpu_count=2)["timing_flag"] == ""
    loaded = timing_fields(samples, "step", [3.1], threads=2, cpu_count=2)
    assert not loaded["timing_reliable"]
    assert loaded["timing_flag"] == "load 3.1 on 2 CPUs (limit 2.5)"
    limit = LOAD_RATIO_MAX * 2
    assert timing_fields(samples, "step", [limit], threads=1, cpu_count=2)["timing_reliable"]
    assert not timing_fields(samples, "step", [limit + 0.01], threads=1, cpu_count=2)["timing_reliable"]


def test_reasons_are_joined():
    fields = timing_fields([1.0, 1.0, 2.0], "repeat", [9.0], threads=1, cpu_count=2)
    assert fields["timing_flag"] == "spread 67% > 25%; load 9.0 on 2 CPUs (limit 2.5)"


def test_no_samples_and_unknown_load():
    fields = timing_fields([], "step", [], threads=1, cpu_count=2)
    assert fields["time_median_s"] is None and fields["time_samples"] == 0
    assert fields["timing_flag"] == "no samples" and fields["load_1m_max"] is None


def test_unknown_loads_are_ignored():
    fields = timing_fields([1.0, 1.0, 1.0], "epoch", [None, float("nan"), 0.5], threads=1, cpu_count=2)
    assert fields["load_1m_max"] == 0.5 and fields["timing_reliable"]


def test_unknown_unit_is_refused():
    with pytest.raises(ValueError, match="time unit 'batch'"):
        timing_fields([1.0], "batch", [0.0], threads=1)


def test_timer_times_each_call_and_reads_the_load(monkeypatch):
    loads = iter([0.5, 3.0, 0.25, 0.75, 1.0, 1.0])
    monkeypatch.setattr(timing, "load_1m", lambda: next(loads))
    timer = Timer("step", threads=1, device=torch.device("cpu"))
    calls = []
    seconds = timer.repeat(lambda: calls.append(sum(range(10000))), 3)
    assert len(seconds) == 3 == len(calls) and all(s > 0 for s in seconds)
    assert timer.loads_1m == [3.0, 0.75, 1.0]
    fields = timer.fields()
    assert fields["load_1m_max"] == 3.0 and fields["time_samples"] == 2
    assert fields["cpu_count"] == timing.available_cpus()


def test_timer_add_keeps_resumed_samples():
    timer = Timer("epoch", threads=1)
    timer.add(5.0, 0.5)
    timer.add(1.0, None)
    assert timer.fields()["time_median_s"] == 1.0 and timer.last_load_1m is None


def test_a_resumed_jobs_samples_drop_each_processs_first_and_other_settings():
    samples = [9.0, 2.0, 2.2, 7.0, 2.1, 30.0, 3.0]
    processes = ["a", "a", "a", "b", "b", "c", "c"]
    settings = ["H100", "H100", "H100", "H100", "H100", "A100", "A100"]
    fields = timing_fields(
        samples, "epoch", [0.5] * 7, threads=1, cpu_count=2, settings=settings, processes=processes
    )
    # the last setting (A100) is the run's: its one steady sample
    assert fields["time_median_s"] == 3.0 and fields["time_samples"] == 1
    assert fields["timing_flag"] == "5 epochs timed in another setting left out; 1 sample"
    same = timing_fields(
        samples[:5],
        "epoch",
        [0.5] * 5,
        threads=1,
        cpu_count=2,
        settings=settings[:5],
        processes=processes[:5],
    )
    assert same["time_median_s"] == 2.1 and same["time_samples"] == 3 and same["timing_reliable"]


def test_samples_that_are_all_warm_ups_are_kept_and_flagged():
    fields = timing_fields(
        [5.0, 6.0], "epoch", [0.5, 0.5], threads=1, cpu_count=2, settings=["s", "s"], processes=["a", "b"]
    )
    assert fields["time_median_s"] == 5.5 and fields["time_samples"] == 2
    assert fields["timing_flag"] == "each epoch the first of its process"


def test_a_timer_restored_from_a_checkpoint_keeps_the_samples_origins():
    first = Timer("epoch", threads=1)
    first.add(4.0, 0.1)
    first.add(1.0, 0.1)
    resumed = Timer("epoch", threads=1)
    for seconds, load, setting, process in zip(
        first.samples_s, first.loads_1m, first.settings, first.processes
    ):
        resumed.add(seconds, load, setting, process)
    resumed.add(5.0, 0.1)
    resumed.add(1.2, 0.1)
    assert resumed.setting == first.setting and resumed.process != first.process
    assert resumed.fields()["time_median_s"] == pytest.approx(1.1)
    other_threads = Timer("epoch", threads=2)
    assert other_threads.setting != first.setting


def test_the_steady_median_leaves_out_the_first_of_two_or_more():
    assert steady_median([9.0, 1.0, 3.0]) == 2.0
    assert steady_median([9.0]) == 9.0 and steady_median([]) is None
