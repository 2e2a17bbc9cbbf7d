"""The memnet command line: evaluate's table at a requested risk, train once + predict for a model
factory (cached, identity-checked, never retrained), bad input in one line."""

import json

import pandas as pd
import pytest

from membench.cli import main
from membench.core.timing import TIMING_FIELDS
from membench.memnet import estimators as estimators_module
from membench.memnet import trained as trained_module
from membench.memnet.commands import build_parser

ESTIMATOR_OPTIONS = ["--members", "1", "--mlp-epochs", "5", "--transformer-epochs", "2"]
ALL = ["gpumemnet_mlp", "gpumemnet_transformer", "horus", "faketensor", "memtracker", "membench"]


def _toy_csv(tmp_path, toy_jobs, n=24, name="toy.csv"):
    jobs = toy_jobs(n)
    frame = jobs.frame
    csv = pd.DataFrame(
        {
            "Filename": [f"arch:{g}_id:{i}.out" for i, g in enumerate(frame["group"])],
            "Depth": frame["depth"],
            "Activations-Params": frame["layers"].map(repr),
            "Activation Function": "ReLU",
            "Total Activations": frame["total_activations"],
            "Total Parameters": frame["total_parameters"],
            "Batch Size": frame["batch_size"],
            "Max GPU Memory (MiB)": frame["memory_mib"].round(1),
        }
    )
    path = tmp_path / name
    csv.to_csv(path, index=False)
    return path


def test_evaluate_reports_the_achieved_rate_beside_the_requested_one(tmp_path, toy_jobs):
    out = tmp_path / "table.csv"
    argv = ["memnet", "evaluate", "--data", str(_toy_csv(tmp_path, toy_jobs)), "--family", "mlp"]
    argv += ["--folds", "3", "--seed", "0", "--out", str(out), "--faketensor-rows", "1", "--timing-rows", "1"]
    assert main([*argv, "--max-under", "0.1", "--device-name", "Test GPU", *ESTIMATOR_OPTIONS]) == 0
    table = pd.read_csv(out)
    assert table["estimator"].tolist() == ALL
    assert (table["max_under"] == 0.1).all() and (table["device_name"] == "Test GPU").all()
    # the ensembles' size and steps, which a published figure's setting names
    ensembles = table[["members", "mlp_epochs", "transformer_epochs"]].drop_duplicates()
    assert ensembles.values.tolist() == [[1, 5, 2]]
    expected = {"accuracy", "under_rate", "under_rate_ci_low", "under_rate_ci_high", "risk_met"}
    expected |= {"raw_accuracy", "raw_under_rate", "mib_under_rate", "grouped_accuracy", "no_answer_reason"}
    assert expected <= set(table.columns)
    assert (table["under_rate_ci_low"] <= table["under_rate"]).all()
    assert (table["under_rate"] <= table["under_rate_ci_high"]).all()
    # 24 jobs, all in one 1,000 MiB class, cannot tell estimators apart: the table says so
    assert (table["too_small_to_judge"] == "24 jobs, fewer than 30; every job in one class").all()
    assert table.loc[table["estimator"] == "faketensor", "rows"].item() == 3  # one per fold
    # a fold calibrates the learned estimators on 30% of its 16 training jobs, Horus on all of them,
    # FakeTensor on the 3-job sample's training jobs (never on the ones it answers for)
    calibrated = table.set_index("estimator")["calibration_jobs"]
    assert (table["min_calibration_jobs"] == 9).all()  # ceil(0.9 / 0.1): fewer answer the last class
    assert calibrated["membench"] == 5 and calibrated["horus"] == 16 and calibrated["faketensor"] < 3
    assert set(TIMING_FIELDS) <= set(table.columns) and (table["time_unit"] == "iteration").all()


def _train(tmp_path, data, outdir, *extra):
    argv = ["memnet", "train", "--data", str(data), "--family", "mlp", "--outdir", str(outdir)]
    return main([*argv, "--faketensor-rows", "2", "--max-under", "0.1", *extra, *ESTIMATOR_OPTIONS])


PREDICT = [
    "memnet",
    "predict",
    "--model",
    "torch.nn:Linear",
    "--kwargs",
    '{"in_features": 16, "out_features": 4}',
]


def test_train_once_then_predict_a_model_factory_from_the_cache(tmp_path, toy_jobs, capsys, monkeypatch):
    data = _toy_csv(tmp_path, toy_jobs, n=60)
    trained = tmp_path / "estimators"
    assert _train(tmp_path, data, trained, "--dataset", "toy", "--device-name", "Test GPU") == 0
    summary = json.loads((trained / "estimators.json").read_text())
    assert summary["family"] == "mlp" and summary["data"]["device_name"] == "Test GPU"
    assert summary["estimators"] == [
        "gpumemnet_mlp",
        "gpumemnet_transformer",
        "membench",
        "horus",
        "faketensor",
        "memtracker",
    ]
    capsys.readouterr()

    def no_training(*_):
        raise AssertionError("predict trained an estimator")

    for kind in ("TensorBytesRegression", "EnsembleClassifier", "Horus", "FakeTensor", "MemTracker"):
        monkeypatch.setattr(getattr(estimators_module, kind), "fit", no_training)
    out = tmp_path / "predicted.csv"
    argv = [
        *PREDICT,
        "--batch-size",
        "8",
        "--input-shape",
        "16",
        "--estimators",
        str(trained),
        "--out",
        str(out),
    ]
    assert main([*argv, "--max-under", "0.1", "--baselines"]) == 0
    printed = capsys.readouterr().out
    assert "recommended: " in printed and "at <= 10.0% risk of under-estimation" in printed
    assert f"trained on toy ({data}, 60 jobs, measured on Test GPU)" in printed
    # the toy file names no Memory Source: GPUMemNet's format, its figures with the CUDA context
    assert "\nmemory of toy: nvidia-smi's memory used during training, as GPUMemNet measures (CUDA" in printed
    # 16*4+4 = 68 parameters, far below the toy data's: the answer is an extrapolation
    assert "warning: parameters 68 is below the" in printed
    table = pd.read_csv(out)
    assert table["estimator"].tolist() == [
        "gpumemnet_mlp",
        "gpumemnet_transformer",
        "membench",
        "horus",
        "faketensor",
        "memtracker",
    ]
    assert set(table["trained_on"]) == {"toy"} and (table["bin"] >= table["raw_bin"]).all()
    membench = table.set_index("estimator").loc["membench"]
    assert membench["low_mib"] <= membench["mib"] <= membench["high_mib"]
    fake = table.set_index("estimator").loc["faketensor", "mib"]
    # weights, gradients, two Adam moments of 16*4+4 parameters, plus the saved input (8x16 floats)
    assert fake * 2**20 >= 4 * 68 * 4 + 8 * 16 * 4


def test_a_cache_from_other_code_or_data_is_refused_and_the_same_one_is_kept(
    tmp_path, toy_jobs, capsys, monkeypatch
):
    data = _toy_csv(tmp_path, toy_jobs, n=40)
    trained = tmp_path / "estimators"
    assert _train(tmp_path, data, trained) == 0
    written = (trained / "estimators.pt").stat().st_mtime_ns
    assert _train(tmp_path, data, trained) == 0  # same options, data and code: kept
    assert (trained / "estimators.pt").stat().st_mtime_ns == written
    argv = [*PREDICT, "--batch-size", "8", "--input-shape", "16", "--estimators", str(trained)]
    monkeypatch.setattr(trained_module, "code_version", lambda *packages: "other code")
    assert main(argv) == 2
    assert "trained by another version of membench's memnet code; retrain them" in capsys.readouterr().err
    monkeypatch.undo()
    _toy_csv(tmp_path, toy_jobs, n=41)  # the data changes under the cache
    assert main(argv) == 2
    assert f"the data it was trained on ({data}) has changed since" in capsys.readouterr().err


def test_predict_finds_the_workflows_estimators_and_prefers_judged_data(
    tmp_path, toy_jobs, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "results" / "memnet" / "estimators"
    assert _train(tmp_path, _toy_csv(tmp_path, toy_jobs, n=24, name="small.csv"), root / "measured_mlp") == 0
    data = _toy_csv(tmp_path, toy_jobs, n=60, name="big.csv")
    assert _train(tmp_path, data, root / "big", "--bins", "1400", "0.5", "6", "--dataset", "big") == 0
    capsys.readouterr()
    assert main([*PREDICT, "--batch-size", "8", "--input-shape", "16", "--max-under", "0.1"]) == 0
    printed = capsys.readouterr().out
    # the 24-job smoke test (one class) is left out where judged data answers for the family
    assert "trained on big (" in printed and "measured_mlp" not in printed


def test_predict_without_trained_estimators_answers_uncalibrated_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no results/memnet/estimators here
    assert main([*PREDICT, "--batch-size", "8", "--input-shape", "16"]) == 0
    printed = capsys.readouterr().out
    assert "recommended: none at <= 2.0% risk" in printed
    assert "warning: no trained estimators for mlp models" in printed


def test_a_wrong_input_shape_is_one_line_naming_it(capsys):
    assert main([*PREDICT, "--batch-size", "8", "--input-shape", "3,32,32"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(
        "membench memnet: error: <input>: --input-shape 3,32,32: the model's forward pass fails on a "
        "batch of shape (2, 3, 32, 32) float32 (RuntimeError: "
    )
    assert err.endswith("give one sample's shape, without the batch")


def test_predict_help_says_what_it_prints_and_shows_an_example():
    predict = build_parser("membench memnet")._subparsers._group_actions[0].choices["predict"]
    text = predict.format_help()
    for words in (
        "recommended",
        "--max-under",
        "trained on",
        "warning",
        "example",
        "--baselines",
        "extrapolation",
        "CUDA context",
    ):
        assert words in text, words


def test_bad_input_is_one_line_naming_it(tmp_path, capsys):
    assert (
        main(["memnet", "predict", "--model", "no_such_module:f", "--batch-size", "2", "--input-shape", "3"])
        == 2
    )
    assert "cannot import no_such_module" in capsys.readouterr().err
    assert (
        main(["memnet", "predict", "--model", "torch.nn:Linear", "--batch-size", "2", "--input-shape", "3,x"])
        == 2
    )
    assert "--input-shape '3,x'" in capsys.readouterr().err
    kwargs = ["--kwargs", '{"in_features": 16, "no_such": 1}']
    assert (
        main(
            [
                "memnet",
                "predict",
                "--model",
                "torch.nn:Linear",
                *kwargs,
                "--batch-size",
                "2",
                "--input-shape",
                "16",
            ]
        )
        == 2
    )
    assert "--kwargs: the factory fails with them (TypeError: " in capsys.readouterr().err
    missing = tmp_path / "absent.csv"
    argv = ["memnet", "evaluate", "--data", str(missing), "--family", "mlp", "--out", str(tmp_path / "t.csv")]
    assert main(argv) == 2
    assert f"{missing}: file not found" in capsys.readouterr().err
    assert not (tmp_path / "t.csv").exists()


EVALUATION = (
    "dataset,estimator,max_under,accuracy,under_rate,raw_accuracy,raw_under_rate\n"
    "mlp,horus,0.05,0.8,0.04,0.7,0.1\n"
)
PREDICTIONS = (
    "dataset,estimator,split,fold,true_bin,pred_bin\nmlp,horus,kfold,0,1,2\nmlp,horus,kfold,1,0,-1\n"
)
BAD_TABLES = {
    "missing": (None, "file not found"),
    "empty": ("", "file is empty"),
    "lacking-column": ("dataset,estimator,split,true_bin\nmlp,horus,kfold,1\n", "missing column(s) pred_bin"),
    "bad-class": (
        "dataset,estimator,split,true_bin,pred_bin\nmlp,horus,kfold,1,x\n",
        "line 2: column pred_bin",
    ),
}


def _plot_argv(tmp_path, table, predictions):
    return [
        *("memnet", "plot", "--table", str(table), "--predictions", str(predictions)),
        *("--confusion-png", str(tmp_path / "confusion.png")),
        *("--comparison-png", str(tmp_path / "comparison.png")),
        *("--tradeoff-png", str(tmp_path / "tradeoff.png")),
    ]


def _one_line_naming(capsys, path, problem):
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0, err
    assert err.startswith(f"membench memnet: error: {path}") and problem in err, err


def test_plot_reads_its_tables_and_draws_the_figures(tmp_path):
    (tmp_path / "evaluation.csv").write_text(EVALUATION)
    (tmp_path / "predictions.csv").write_text(PREDICTIONS)
    assert main(_plot_argv(tmp_path, tmp_path / "evaluation.csv", tmp_path / "predictions.csv")) == 0
    assert all(
        (tmp_path / f"{name}.png").stat().st_size > 0 for name in ("confusion", "comparison", "tradeoff")
    )


@pytest.mark.parametrize("text, problem", BAD_TABLES.values(), ids=BAD_TABLES)
def test_plot_bad_predictions_are_one_line_naming_the_file(tmp_path, capsys, text, problem):
    (tmp_path / "evaluation.csv").write_text(EVALUATION)
    predictions = tmp_path / "predictions.csv"
    if text is not None:
        predictions.write_text(text)
    assert main(_plot_argv(tmp_path, tmp_path / "evaluation.csv", predictions)) == 2
    _one_line_naming(capsys, predictions, problem)
    assert not (tmp_path / "confusion.png").exists()


@pytest.mark.parametrize(
    "text, problem", [(None, "file not found"), ("", "file is empty")], ids=["missing", "empty"]
)
def test_plot_table_and_clean_name_a_missing_or_empty_input(tmp_path, capsys, text, problem):
    bad = tmp_path / "bad.csv"
    if text is not None:
        bad.write_text(text)
    (tmp_path / "predictions.csv").write_text(PREDICTIONS)
    assert main(_plot_argv(tmp_path, bad, tmp_path / "predictions.csv")) == 2
    _one_line_naming(capsys, bad, problem)
    assert main(["memnet", "table", "--out", str(tmp_path / "memnet.csv"), str(bad)]) == 2
    _one_line_naming(capsys, bad, problem)
    configs = tmp_path / "configs.csv"
    assert main(["memnet", "generate", "--family", "mlp", "--count", "2", "--out", str(configs)]) == 0
    argv = ["memnet", "clean", "--configs", str(configs), "--measurements", str(bad), "--family", "mlp"]
    assert main([*argv, "--out", str(tmp_path / "jobs.csv")]) == 2
    _one_line_naming(capsys, bad, problem)


def test_predict_bounds_the_sample_shape_and_the_factory_arguments_before_using_them(capsys):
    argv = ["memnet", "predict", "--model", "torch.nn:Linear", "--batch-size", "2"]
    assert main([*argv, "--input-shape", "4096,4096,8"]) == 2
    assert (
        "--input-shape '4096,4096,8': expected positive integers separated by commas, at most 67108864 values"
        in capsys.readouterr().err
    )
    kwargs = "[" + "1, " * 100_000 + "1]"
    assert main([*argv, "--input-shape", "3", "--kwargs", kwargs]) == 2
    assert f"--kwargs: {len(kwargs)} characters; at most 65536 are read" in capsys.readouterr().err


@pytest.mark.parametrize("risk", ["0", "0.5000001", "nan"])
def test_the_requested_risk_is_a_rate_above_zero_and_at_most_one_half(risk, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*PREDICT, "--batch-size", "2", "--input-shape", "16", "--max-under", risk])
    assert exit_.value.code == 2
    assert "argument --max-under: expected a number above 0 and at most 0.5" in capsys.readouterr().err


def _model_record(path, name, batch, memory_mib, status="SUCCESSFUL"):
    """A measured real model's record as the campaign writes it (a two-layer MLP)."""
    from membench.core import atomic

    record = {
        "config_id": f"{name}_b{batch}",
        "filename": name,
        "family": "timm",
        "batch_size": batch,
        "layers": [["linear", 2000, 40_000], ["relu", 2000, 0], ["linear", 10, 20_010]],
        "module_counts": {"Sequential": 1, "Linear": 2, "ReLU": 1},
        "total_parameters": 60_010,
        "status": status,
        "memory_mib": memory_mib,
        "device_name": "Test GPU",
    }
    atomic.write_json(path / f"{record['config_id']}.json", record)


def test_compare_sets_every_estimator_beside_each_measured_model(tmp_path, toy_jobs):
    trained = tmp_path / "estimators"
    assert _train(tmp_path, _toy_csv(tmp_path, toy_jobs, n=40), trained) == 0
    records = tmp_path / "records"
    records.mkdir()
    _model_record(records, "small", 8, 1500.0)
    _model_record(records, "small", 64, None, status="OOM_CRASH")
    atomic_failed = {"config_id": "broken_b8", "filename": "broken", "status": "FAILED", "memory_mib": None}
    (records / "broken_b8.json").write_text(json.dumps(atomic_failed))
    out = tmp_path / "compare.csv"
    argv = ["memnet", "compare", "--records", str(records), "--estimators", str(trained), "--out", str(out)]
    assert main([*argv, "--max-under", "0.1"]) == 0
    table = pd.read_csv(out)
    # the failed record has no layer list: no row; the others, one row per estimator
    assert sorted(set(table["model"])) == ["small"] and sorted(set(table["batch_size"])) == [8, 64]
    assert set(table["estimator"]) == set(ALL) and len(table) == 2 * len(ALL)
    fits = table[table["batch_size"] == 8]
    assert (fits["measured_mib"] == 1500.0).all() and (fits["true_bin"] == 0).all()
    assert not fits["under"].any()  # class 0 holds the measured peak: no answer can lie below it
    # the models' 3x224x224 images, where the toy MLPs' inputs are 1 to 3,596 values
    assert (
        fits["warnings"]
        .str.contains("input values per sample 150,528 is above the 1-3,596 of the data")
        .all()
    )
    oom = table[table["batch_size"] == 64]
    assert (oom["status"] == "OOM_CRASH").all() and (oom["true_bin"] == 4).all()  # the last of 5 classes
    assert (oom["under"] == oom["bin"].between(0, 3)).all()  # -1 is no answer, not an under-estimate
    # out of memory: above every estimator's figure in MiB (the classifiers give none)
    assert oom["mib_under"].tolist() == oom["mib"].notna().tolist() and oom["mib_under"].any()


def test_compare_refuses_two_sets_of_estimators_for_one_family_in_one_line(tmp_path, toy_jobs, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    for outdir in (first, second):
        assert _train(tmp_path, _toy_csv(tmp_path, toy_jobs, n=40), outdir) == 0
    records = tmp_path / "records"
    records.mkdir()
    _model_record(records, "small", 8, 1500.0)
    argv = ["memnet", "compare", "--records", str(records), "--estimators", str(first), str(second)]
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "out.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(second) in err
    assert "a second set of mlp estimators; give one per family" in err
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize(
    ("setup", "problem"),
    [
        ("empty", "holds no records (*.json)"),
        ("failed", "no record holds a layer list: every measurement failed"),
    ],
)
def test_compare_refuses_records_it_cannot_use_in_one_line(tmp_path, toy_jobs, capsys, setup, problem):
    trained = tmp_path / "estimators"
    assert _train(tmp_path, _toy_csv(tmp_path, toy_jobs, n=40), trained) == 0
    records = tmp_path / "records"
    records.mkdir()
    if setup == "failed":
        (records / "x_b8.json").write_text(json.dumps({"config_id": "x_b8", "status": "TIMEOUT"}))
    argv = ["memnet", "compare", "--records", str(records), "--estimators", str(trained)]
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "out.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(records) in err and problem in err
    assert not (tmp_path / "out.csv").exists()
