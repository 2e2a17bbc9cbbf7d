"""The memnet command line: evaluate's table, train + predict for a model factory, bad input."""

import json

import pandas as pd

from membench.cli import main
from membench.core.timing import TIMING_FIELDS
from membench.memnet.dataset import DEFAULT_BINS
from membench.memnet.estimators import new_estimator

ESTIMATOR_OPTIONS = ["--members", "1", "--mlp-epochs", "5", "--transformer-epochs", "2"]


def _toy_csv(tmp_path, toy_jobs, n=24):
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
    path = tmp_path / "toy.csv"
    csv.to_csv(path, index=False)
    return path


def test_evaluate_writes_one_row_per_estimator(tmp_path, toy_jobs):
    out = tmp_path / "table.csv"
    assert (
        main(
            [
                "memnet",
                "evaluate",
                "--data",
                str(_toy_csv(tmp_path, toy_jobs)),
                "--family",
                "mlp",
                "--folds",
                "3",
                "--seed",
                "0",
                "--out",
                str(out),
                "--faketensor-rows",
                "1",
                "--timing-rows",
                "1",
                *ESTIMATOR_OPTIONS,
            ]
        )
        == 0
    )
    table = pd.read_csv(out)
    assert table["estimator"].tolist() == [
        "gpumemnet_mlp",
        "gpumemnet_transformer",
        "horus",
        "faketensor",
        "membench",
    ]
    assert {"accuracy", "f1_weighted", "under_rate", "inference_ms", "grouped_accuracy"} <= set(table.columns)
    assert table.loc[table["estimator"] == "faketensor", "rows"].item() == 3  # one per fold
    assert set(TIMING_FIELDS) <= set(table.columns) and (table["time_unit"] == "iteration").all()


def test_train_then_predict_a_model_factory(tmp_path, toy_jobs):
    trained = tmp_path / "estimators"
    assert (
        main(
            [
                "memnet",
                "train",
                "--data",
                str(_toy_csv(tmp_path, toy_jobs)),
                "--family",
                "mlp",
                "--outdir",
                str(trained),
                *ESTIMATOR_OPTIONS,
            ]
        )
        == 0
    )
    assert json.loads((trained / "estimators.json").read_text())["family"] == "mlp"
    out = tmp_path / "predicted.csv"
    assert (
        main(
            [
                "memnet",
                "predict",
                "--model",
                "torch.nn:Linear",
                "--kwargs",
                '{"in_features": 16, "out_features": 4}',
                "--batch-size",
                "8",
                "--input-shape",
                "16",
                "--estimators",
                str(trained),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    table = pd.read_csv(out)
    assert set(table["estimator"]) == {
        "horus",
        "gpumemnet_mlp",
        "gpumemnet_transformer",
        "membench",
        "faketensor",
    }
    fake = table.set_index("estimator").loc["faketensor", "mib"]
    # weights, gradients, two Adam moments of 16*4+4 parameters, plus the saved input (8x16 floats)
    assert fake * 2**20 >= 4 * 68 * 4 + 8 * 16 * 4


def test_predict_reuses_a_trained_estimator_unchanged(toy_jobs):
    jobs = toy_jobs(12)
    first = new_estimator("membench", DEFAULT_BINS["mlp"])
    first.fit(jobs)
    second = new_estimator("membench", DEFAULT_BINS["mlp"])
    second.load_state(first.state())
    assert (first.predict(jobs)[0] == second.predict(jobs)[0]).all()


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
    missing = tmp_path / "absent.csv"
    assert (
        main(
            [
                "memnet",
                "evaluate",
                "--data",
                str(missing),
                "--family",
                "mlp",
                "--out",
                str(tmp_path / "t.csv"),
            ]
        )
        == 2
    )
    assert f"{missing}: file not found" in capsys.readouterr().err
    assert not (tmp_path / "t.csv").exists()


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
