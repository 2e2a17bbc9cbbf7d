"""The rules of a quality figure that says little, shared by the report's summary and the systems'
figures: per-epoch histories read from table cells, and a run still improving in its last epoch."""

import math

import pytest

from membench.core.evaluation import epoch_history, still_improving


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("[0.5, 0.4, 0.3]", [0.5, 0.4, 0.3]),
        ([1, "2", None, "x", math.inf], [1.0, 2.0]),
        (None, []),
        (math.nan, []),
        ("", []),
        ("not json", []),
        ('{"a": 1}', []),
    ],
)
def test_epoch_history_reads_finite_numbers_of_a_list(value, expected):
    assert epoch_history(value) == expected


def test_a_loss_still_falling_by_more_than_the_relative_change_is_still_improving():
    # Best earlier loss 0.5; the last epoch is 10% below it.
    assert still_improving([0.6, 0.5, 0.45], goal="min", min_change=0.02, relative=True) == pytest.approx(0.1)
    assert still_improving([0.6, 0.5, 0.495], goal="min", min_change=0.02, relative=True) is None


def test_an_accuracy_still_rising_by_more_than_the_points_is_still_improving():
    assert still_improving([0.7, 0.8, 0.9], goal="max", min_change=0.005, relative=False) == pytest.approx(
        0.1
    )
    assert still_improving([0.7, 0.9, 0.8], goal="max", min_change=0.005, relative=False) is None
    assert still_improving([0.9], goal="max", min_change=0.005, relative=False) is None
