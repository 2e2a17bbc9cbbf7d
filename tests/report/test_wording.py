"""How the summary words its numbers: ratios, accuracy changes, settings."""

from membench.report.wording import (
    fill_setting,
    memory_ratio_words,
    memory_words,
    points_words,
    time_ratio_words,
)


def test_ratios_read_as_words():
    assert memory_ratio_words(1 / 10.7) == "10.7x less" and memory_ratio_words(1.3) == "1.3x more"
    assert time_ratio_words(1.9) == "1.9x slower" and time_ratio_words(0.5) == "2.0x faster"
    assert memory_ratio_words(1.02) == "about the same"
    assert memory_ratio_words(None) == "-" and time_ratio_words(float("nan")) == "-"
    assert memory_ratio_words(1 / 361.8) == "362x less"


def test_accuracy_changes_read_in_points():
    assert points_words(-0.02) == "-2.0 points" and points_words(0.0017) == "+0.2 points"
    assert points_words(0.0001) == "no change"


def test_memory_and_settings():
    assert memory_words(20975.2, "GiB") == "20.5 GiB" and memory_words(408.25) == "408 MiB"
    assert memory_words(17.88) == "17.9 MiB"
    setting = fill_setting(
        "{num_filters} filters, {max_len:bytes} files, eps {eps:.3g}, {absent}",
        {
            "num_filters": 256,
            "max_len": 2097152,
            "eps": 0.1,
        },
    )
    assert setting == "256 filters, 2 MiB files, eps 0.1, ?"
