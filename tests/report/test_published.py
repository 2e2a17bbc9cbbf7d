"""The shipped published figures: every entry is complete and cites its source; bad files fail clearly."""

import os

import pytest
import yaml

from membench.core.errors import InputError
from membench.report.published import METRICS, SYSTEMS, default_published_path, load_published

# The works the shipped figures come from, by the names a reader can look up; a reference point of
# membench's own is labelled as such, never as a paper's.
SOURCES = (
    "the HotConv README",
    "DIVISION: Memory Efficient Training via Dual Activation Precision",
    "Gunrock's Application Classification report",
    "GPUMemNet (github.com/itu-rad/GPUMemNet)",
    "Fast is better than free: Revisiting adversarial training",
    "Parallel Training of Robust Neural Networks",
    "membench's own reference point, not a paper's",
)


def test_shipped_figures_are_valid_and_name_the_work_they_come_from():
    figures = load_published(default_published_path())
    assert {figure["system"] for figure in figures} == set(SYSTEMS)
    for figure in figures:
        assert figure["metric"] in METRICS
        assert sum(name in figure["source"] for name in SOURCES) == 1, figure["id"]
        assert figure["setting"].strip() and figure["requires"]


def test_shipped_ratios_follow_from_the_quoted_numbers():
    figures = {figure["id"]: figure for figure in load_published(default_published_path())}
    assert figures["division_activation_memory"]["value"] == pytest.approx(1.97 / 20.48, abs=5e-4)
    assert figures["division_throughput"]["value"] == pytest.approx(469 / 381, abs=5e-4)
    assert figures["hotconv_eco_memory"]["value"] == pytest.approx(1 / 22, abs=5e-4)
    assert figures["hotconv_time"]["value"] == pytest.approx(38 / 52, abs=5e-4)
    assert figures["appclass_cuda_georgiy"]["value"] == pytest.approx(546.305180 / 42.533, abs=0.05)


def figures_file(tmp_path, figures):
    path = tmp_path / "figures.yaml"
    path.write_text(yaml.safe_dump({"figures": figures}))
    return path


def test_a_figure_without_a_source_is_refused_naming_it(tmp_path):
    figure = dict(load_published(default_published_path())[0])
    del figure["source"]
    with pytest.raises(InputError, match=r"figures\.yaml, figures\[0\]: 'source' must be a non-empty text"):
        load_published(figures_file(tmp_path, [figure]))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("metric", "memory", "'metric' is 'memory', expected one of"),
        ("value", "about 2", "'value' must be a number"),
        ("tolerance", -1, "'tolerance' must not be negative"),
        ("requires", {}, "'requires' must be a non-empty mapping"),
    ],
)
def test_malformed_fields_are_refused(tmp_path, field, value, message):
    figure = dict(load_published(default_published_path())[0]) | {field: value}
    with pytest.raises(InputError, match=message):
        load_published(figures_file(tmp_path, [figure]))


def test_duplicate_ids_missing_file_and_bad_yaml(tmp_path):
    figure = load_published(default_published_path())[0]
    with pytest.raises(InputError, match="appears twice"):
        load_published(figures_file(tmp_path, [figure, figure]))
    with pytest.raises(InputError, match="not found"):
        load_published(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("figures: [\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_published(tmp_path / "bad.yaml")


@pytest.mark.timeout(10)
def test_a_pipe_as_the_figures_file_is_named_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "figures.yaml")
    with pytest.raises(InputError, match=r"figures.yaml: is a named pipe \(FIFO\), not a regular file$"):
        load_published(tmp_path / "figures.yaml")
