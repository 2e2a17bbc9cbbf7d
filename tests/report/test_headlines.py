"""The shipped headline declarations: complete, citing their works, membench's own reference points
labelled as such; malformed declarations fail naming the file and the key."""

import os

import pytest
import yaml

from membench.core.errors import InputError
from membench.report.headlines import (
    MEMBENCH_SOURCE,
    default_headlines_dir,
    headline_tables,
    load_headline,
    load_headlines,
)

HEADLINES = load_headlines(default_headlines_dir())
FIGURES = {figure.id: figure for headline in HEADLINES for figure in headline.figures}
# Each cited work names its title and where it was published (a venue, arXiv or its repository).
WHERE_PUBLISHED = ("ICML 2023", "ICLR 2020", "arXiv", "github.com", "HIVE", "project slides")


def test_every_system_declares_its_headline_and_reads_its_own_tables():
    assert {h.system for h in HEADLINES} == {"hotconv", "division", "appclass", "memnet", "robust"}
    for headline in HEADLINES:
        assert all(row.table.startswith(headline.system) for row in headline.rows), headline.system
    assert "division_memory" in headline_tables(HEADLINES) and "hotconv_bench" in headline_tables(HEADLINES)


def test_every_paper_figure_cites_its_work_and_says_how_it_is_judged():
    for figure in FIGURES.values():
        assert figure.cited_at and figure.setting and figure.requires and figure.tolerance_reason
        assert figure.command.startswith("snakemake "), figure.id
        if figure.is_reference_point:
            assert figure.citation == "membench's own reference point, not a paper's figure"
        else:
            assert any(word in figure.citation for word in WHERE_PUBLISHED), figure.id
            assert "membench" not in figure.citation, figure.id


def test_shipped_values_follow_from_the_quoted_numbers():
    assert FIGURES["division_activation_factor"].value == pytest.approx(20.48 / 1.97, abs=0.05)
    assert FIGURES["division_throughput"].value == pytest.approx(469 / 381, abs=5e-4)
    assert FIGURES["checkpoint_throughput"].value == pytest.approx(469 / 122, abs=5e-4)
    assert FIGURES["hotconv_epoch_time"].value == pytest.approx(38 / 52, abs=5e-4)
    assert FIGURES["appclass_speedup_rmat18"].value == pytest.approx(82495.028973 / 827.573, abs=1)


def test_reference_points_are_membench_own():
    points = [f for f in FIGURES.values() if f.is_reference_point]
    assert points and all(f.source == MEMBENCH_SOURCE and f.system == "robust" for f in points)


def write(tmp_path, document, name="x.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document))
    return path


def shipped(system="division"):
    with open(default_headlines_dir() / f"{system}.yaml", encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["figures"][0].pop("source"), r"key 'figures\.division_vanilla_activation_gib\.source'"),
        (lambda d: d["figures"][0].update(metric="memory_bytes"), r"metric'.*expected one of memory"),
        (lambda d: d["figures"][0].update(value="about 20"), r"value': expected a number"),
        (lambda d: d["figures"][0].update(tolerance=-1), r"tolerance': must not be negative"),
        (lambda d: d["figures"][0].update(requires={}), r"requires': expected the paper's setting"),
        (lambda d: d["figures"][0].update(row="nope"), r"row': no row 'nope'"),
        (lambda d: d["figures"][0].update(unit="GB"), r"unit': a memory figure needs its unit"),
        (lambda d: d["figures"][0].update(source="blog"), r"source': no source 'blog'"),
        (lambda d: d["rows"][0].update(colour="red"), r"key 'rows\[0\]\.colour': unknown key"),
        (lambda d: d["rows"][0].pop("baseline"), r"give exactly one of baseline and baseline_column"),
        (lambda d: d["sources"].update(membench="mine"), r"'membench' is reserved"),
        (
            lambda d: d["figures"][0]["requires"].update(width=[]),
            r"requires\.width': expected a value or a non-empty list of values",
        ),
        (
            lambda d: d["rows"][0].update(no_baseline="why"),
            r"no_baseline': only a baseline_column can be empty",
        ),
        # A paired ratio is a time's: under memory it is an unknown key.
        (
            lambda d: d["rows"][0]["memory"].update(paired="vs_paired_vanilla"),
            r"key 'rows\[0\]\.memory\.paired': unknown key",
        ),
    ],
)
def test_malformed_declarations_name_the_file_and_key(tmp_path, change, message):
    document = shipped()
    change(document)
    with pytest.raises(InputError, match=message) as error:
        load_headline(write(tmp_path, document))
    assert str(error.value).startswith(str(tmp_path / "x.yaml"))


def test_a_system_or_figure_declared_twice_and_bad_files(tmp_path):
    write(tmp_path, shipped(), "a.yaml")
    write(tmp_path, shipped(), "b.yaml")
    with pytest.raises(InputError, match=r"b\.yaml, key 'system': system 'division' is declared twice"):
        load_headlines(tmp_path)
    with pytest.raises(InputError, match="headline declaration not found"):
        load_headline(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("rows: [\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_headline(tmp_path / "bad.yaml")


@pytest.mark.timeout(10)
def test_a_pipe_as_a_declaration_is_named_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "x.yaml")
    with pytest.raises(InputError, match=r"x.yaml: is a named pipe \(FIFO\), not a regular file$"):
        load_headline(tmp_path / "x.yaml")
