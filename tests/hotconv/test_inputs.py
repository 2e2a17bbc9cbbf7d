"""Bad input ends in an InputError (exit code 2 on the command line) naming the file or key."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from membench.cli import main
from membench.core.errors import InputError
from membench.core.metrics import read_metrics
from membench.hotconv.models import ModelSpec
from membench.hotconv.train import TrainSpec, read_num_classes, train_job

CPU = torch.device("cpu")
MODEL = ModelSpec("hotconv", 2, num_filters=4, window_size=16, stride=16, fp_slice_size=64, fp2_slice_size=16)
TRAIN = TrainSpec(epochs=1, batch_size=8, max_len=1024, memory_probe_steps=1)


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"variant": "malconv3"}, "variant"),
        ({"stride": 32}, "stride"),
        ({"fp_slice_size": 40}, "fp_slice_size"),
        ({"fp_slice_size": 8, "stride": 8}, "fp_slice_size"),
        ({"fp2_slice_size": 24}, "fp2_slice_size"),
        ({"num_filters": 0}, "num_filters"),
        ({"num_classes": 1}, "num_classes"),
    ],
)
def test_bad_model_settings_name_the_key(changes, key):
    settings = {
        "variant": "hotconv",
        "num_classes": 2,
        "num_filters": 4,
        "window_size": 16,
        "stride": 16,
        "fp_slice_size": 64,
        "fp2_slice_size": 16,
        **changes,
    }
    with pytest.raises(InputError) as error:
        ModelSpec(**settings)
    assert error.value.where == f"key '{key}'"


@pytest.mark.parametrize(
    "changes, key", [({"epochs": 0}, "epochs"), ({"learning_rate": 0.0}, "learning_rate")]
)
def test_bad_training_settings_name_the_key(changes, key):
    with pytest.raises(InputError) as error:
        TrainSpec(**changes)
    assert error.value.where == f"key '{key}'"


def test_class_table_must_number_classes_from_zero(tmp_path):
    path = tmp_path / "classes.csv"
    path.write_text("Label,Name,Count\n0,benign,3\n2,malware,4\n")
    with pytest.raises(InputError, match="labels must be 0..N-1") as error:
        read_num_classes(path)
    assert error.value.path == str(path)
    path.write_text("Label,Name\n0,benign\n1,malware\n")
    with pytest.raises(InputError, match="missing column"):
        read_num_classes(path)


def _rewrite_row(csv: str, row: int, replace: str, by: str) -> None:
    lines = Path(csv).read_text().splitlines()
    lines[row] = lines[row].replace(replace, by, 1)
    Path(csv).write_text("\n".join(lines) + "\n")


def test_label_out_of_range_names_the_file_and_line(fold_copy, tmp_path):
    lines = Path(fold_copy.train).read_text().splitlines()
    name, label, size = lines[2].split(",")
    lines[2] = f"{name},7,{size}"
    Path(fold_copy.train).write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="above the maximum 1") as error:
        train_job(fold_copy, MODEL, TRAIN, "tiny", 1, tmp_path / "job", CPU, sample_interval_s=0.0)
    assert error.value.path == fold_copy.train and error.value.where == "line 3"


def test_file_name_escaping_the_binaries_directory_is_rejected(fold_copy, tmp_path):
    name = Path(fold_copy.test).read_text().splitlines()[1].split(",")[0]
    _rewrite_row(fold_copy.test, 1, name, "../" + name)
    with pytest.raises(InputError, match="escapes the binaries directory") as error:
        train_job(fold_copy, MODEL, TRAIN, "tiny", 1, tmp_path / "job", CPU, sample_interval_s=0.0)
    assert error.value.path == fold_copy.test


def test_empty_validation_split_is_rejected(fold_copy, tmp_path):
    Path(fold_copy.val).write_text("FileName,Label,File_Size\n")
    with pytest.raises(InputError, match="val split is empty"):
        train_job(fold_copy, MODEL, TRAIN, "tiny", 1, tmp_path / "job", CPU, sample_interval_s=0.0)


def test_checkpoint_of_other_settings_is_replaced_and_a_corrupt_one_rejected(tiny_fold, tmp_path):
    train_job(tiny_fold, MODEL, TRAIN, "tiny", 1, tmp_path, CPU, sample_interval_s=0.0)
    other = TrainSpec(epochs=2, batch_size=4, max_len=1024, memory_probe_steps=1)
    record = read_metrics(train_job(tiny_fold, MODEL, other, "tiny", 1, tmp_path, CPU, sample_interval_s=0.0))
    assert record["resumed_from_epoch"] == 0 and record["epochs_run"] == 2 and record["batch_size"] == 4
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="not a membench checkpoint"):
        train_job(tiny_fold, MODEL, TRAIN, "tiny", 1, tmp_path, CPU, sample_interval_s=0.0)


def test_command_line_reports_bad_input_in_one_line(fold_copy, tmp_path, capsys):
    _rewrite_row(fold_copy.val, 0, "Label", "Class")
    code = main(
        [
            "hotconv",
            "train",
            "--variant",
            "hotconv",
            "--train",
            fold_copy.train,
            "--val",
            fold_copy.val,
            "--test",
            fold_copy.test,
            "--classes",
            fold_copy.classes,
            "--binaries",
            fold_copy.binaries,
            "--dataset",
            "tiny",
            "--fold",
            "1",
            "--outdir",
            str(tmp_path / "job"),
            "--device",
            "cpu",
        ]
    )
    message = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(message) == 1
    assert (
        message[0].startswith("membench hotconv: error:")
        and fold_copy.val in message[0]
        and "Label" in message[0]
    )


def test_bench_rejects_a_bad_point_and_model_before_measuring(tmp_path, capsys):
    point = [
        "hotconv",
        "bench",
        "--variant",
        "hotconv",
        "--max-len",
        "4096",
        "--device",
        "cpu",
        "--outdir",
        str(tmp_path / "point"),
    ]
    with pytest.raises(SystemExit) as exit_:
        main([*point, "--batch-size", "0"])
    assert exit_.value.code == 2
    assert "argument --batch-size: expected an integer from 1 to 1048576, got '0'" in capsys.readouterr().err
    assert main([*point, "--batch-size", "2", "--stride", "1024"]) == 2
    assert "key 'stride'" in capsys.readouterr().err
    assert not (tmp_path / "point").exists()


def test_plot_rejects_a_table_without_its_columns(tmp_path, capsys):
    table = tmp_path / "t.csv"
    table.write_text("variant,status\nhotconv,ok\n")
    assert main(["hotconv", "plot-sweep", "--table", str(table), "--out", str(tmp_path / "p.png")]) == 2
    assert "missing column(s) max_len" in capsys.readouterr().err


SWEEP = (
    "variant,status,max_len,batch_size,num_filters,step_alloc_peak_mib,activation_mib\n"
    "malconv2,ok,4096,4,8,40.0,9.6\nhotconv_eco,ok,4096,4,8,4.0,0.96\nhotconv,oom,8192,4,8,,\n"
)
VARIANTS = (
    "variant,test_accuracy,num_filters,batch_size,max_len\nmalconv2,0.9,8,4,4096\nhotconv_eco,0.85,8,4,4096\n"
)


def test_plot_reads_the_variants_and_the_sweep_tables(tmp_path):
    (tmp_path / "sweep.csv").write_text(SWEEP)
    (tmp_path / "variants.csv").write_text(VARIANTS)
    argv = [
        "hotconv",
        "plot",
        "--table",
        str(tmp_path / "variants.csv"),
        "--sweep",
        str(tmp_path / "sweep.csv"),
    ]
    assert main([*argv, "--out", str(tmp_path / "variants.png")]) == 0
    assert (
        main(
            [
                "hotconv",
                "plot-sweep",
                "--table",
                str(tmp_path / "sweep.csv"),
                "--out",
                str(tmp_path / "sweep.png"),
            ]
        )
        == 0
    )
    assert (tmp_path / "variants.png").stat().st_size > 0 and (tmp_path / "sweep.png").stat().st_size > 0


@pytest.mark.parametrize(
    "text, problem",
    [
        (None, "file not found"),
        ("", "file is empty"),
        (SWEEP.replace(",activation_mib", ""), "missing column(s) activation_mib"),
        (SWEEP.replace("4096,4,8,40.0", "4k,4,8,40.0"), "line 2: column max_len: '4k' is not an integer"),
    ],
    ids=["missing", "empty", "lacking-column", "bad-max-len"],
)
@pytest.mark.parametrize("step", ["plot-sweep", "plot"])
def test_plot_bad_sweep_table_is_one_line_naming_it(tmp_path, capsys, step, text, problem):
    sweep = tmp_path / "sweep.csv"
    if text is not None:
        sweep.write_text(text)
    (tmp_path / "variants.csv").write_text(VARIANTS)
    inputs = (
        ["--table", str(sweep)]
        if step == "plot-sweep"
        else ["--table", str(tmp_path / "variants.csv"), "--sweep", str(sweep)]
    )
    assert main(["hotconv", step, *inputs, "--out", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0, err
    assert err.startswith(f"membench hotconv: error: {sweep}") and problem in err, err
    assert not (tmp_path / "p.png").exists()
