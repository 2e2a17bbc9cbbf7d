"""Estimators: Horus by hand, FakeTensor against real tensors, MemTracker's peak, rows in GPUMemNet's
CNN and Transformer formats rebuilt or refused with a reason, fresh models in every fold."""

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from membench.core.errors import InputError
from membench.core.tracers import SavedActivationCounter
from membench.memnet import faketensor
from membench.memnet.dataset import Bins, Jobs, load_jobs
from membench.memnet.estimators import (
    ESTIMATORS,
    MIB,
    new_estimator,
    saved_elements,
    tensor_terms_mib,
)
from membench.memnet.evaluate import evaluate
from membench.memnet.models import build_cnn_from_layers, layer_summary


def test_horus_on_a_hand_computed_case():
    # A = 1000 activations per sample, P = 10_000 parameters, B = 32:
    # 4 * ((1000*32 + 10000) + 32*10000) bytes = 4 * 362000 = 1_448_000 bytes = 1.380920... MiB
    frame = pd.DataFrame({"total_activations": [1000], "total_parameters": [10_000], "batch_size": [32]})
    answer = new_estimator("horus", Bins(0.0, 1.0, 4)).predict(Jobs("mlp", frame, "x"))
    assert answer.mib[0] == pytest.approx(1_448_000 / 2**20)
    # uncalibrated: the estimate's class; with no calibration jobs no risk can be promised: the last
    assert answer.raw_bins[0] == 1 and answer.bins[0] == 3


def _small_model():
    return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 5))


def test_faketensor_equals_saved_activation_parameter_gradient_optimizer_bytes():
    batch = 8
    counted = faketensor.step_bytes(
        _small_model, lambda: (torch.empty(batch, 12), torch.zeros(batch, dtype=torch.long))
    )
    model = _small_model()
    x, y = torch.randn(batch, 12), torch.zeros(batch, dtype=torch.long)
    with SavedActivationCounter(exclude=list(model.parameters())) as saved:
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt = torch.optim.Adam(model.parameters())
    opt.step()
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    state_bytes = sum(v.numel() * 4 for s in opt.state.values() for v in s.values() if v.dim() > 0)
    assert counted.parameter_bytes == param_bytes == (12 * 32 + 32 + 32 * 5 + 5) * 4
    assert counted.gradient_bytes == param_bytes
    assert counted.optimizer_bytes == state_bytes == 2 * param_bytes
    assert counted.activation_bytes == saved.peak_bytes > 0
    assert counted.total_bytes == saved.peak_bytes + 4 * param_bytes


def test_memtracker_peak_holds_weights_gradients_moments_and_the_batch_at_once():
    batch = 8
    make_batch = lambda: (torch.empty(batch, 12), torch.zeros(batch, dtype=torch.long))  # noqa: E731
    peak = faketensor.tracked_peak_bytes(_small_model, make_batch)
    param_bytes = (12 * 32 + 32 + 32 * 5 + 5) * 4
    # In the second step: weights, two Adam moments, then gradients while the batch and its
    # activations are alive; the inputs (8 x 12 floats, 8 int64 targets) are tracked too.
    assert peak >= 4 * param_bytes + batch * 12 * 4 + batch * 8
    assert peak <= faketensor.step_bytes(_small_model, make_batch).total_bytes + 64 * 1024


def test_saved_elements_follow_what_autograd_keeps():
    # linear keeps its input (4); ReLU keeps its output (3), which the next linear keeps too; dropout
    # keeps a one-byte mask (a quarter of 3 floats); the last linear keeps the dropout's output (3).
    layers = [("linear", 3, 15), ("ReLU", 3, 0), ("dropout", 3, 0), ("linear", 2, 8)]
    assert saved_elements(layers, input_elements=4) == 4 + 3 + 0.75 + 3


def _gpumemnet_cnn_row(model: nn.Module, batch: int, channels: int, size: int) -> dict:
    """A row as GPUMemNet's CNN cleaner writes it: torchsummary's names, activations for the whole
    batch, no Flatten, its file-name tokens."""
    names = {"Conv2d": "conv2d", "BatchNorm2d": "batchnorm2d", "AdaptiveAvgPool2d": "adaptive_avg_pool2d"}
    layers = [
        (names.get(name, name), a * batch, p)
        for name, a, p in layer_summary(model, torch.randn(2, channels, size, size))
        if name != "Flatten"
    ]
    return {
        "Filename": f"input_channels:{channels}_num_classes:5_depth:2_arch:plain_base_filters:8_batch:{batch}"
        f"_input_size:{size}_act:relu_dropout:0.2_dropout:True_batchnorm:True.out",
        "Depth": 3,
        "Activations-Params": repr(layers),
        "Activation Function": "ReLU",
        "Total Activations": sum(a for _, a, _ in layers),
        "Total Parameters": sum(p.numel() for p in model.parameters()),
        "Batch Size": batch,
        "Conv2d Count": 2,
        "BatchNorm2d Count": 1,
        "Dropout Count": 1,
        "AdaptiveAvgPool2d Count": 1,
        "Linear Count": 1,
        "Max GPU Memory (MiB)": 2000,
        "Status": "SUCCESSFUL",
    }


def _cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Dropout(0.2),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 5),
    )


def test_faketensor_and_memtracker_answer_on_gpumemnet_cnn_rows(tmp_path):
    batch, channels, size = 4, 3, 12
    frame = pd.DataFrame([_gpumemnet_cnn_row(_cnn(), batch, channels, size)])
    frame.to_csv(tmp_path / "cnn.csv", index=False)
    jobs = load_jobs(tmp_path / "cnn.csv", "cnn")
    assert jobs.activations_per_batch and jobs.frame["input_elements"][0] == channels * size * size
    make_batch = lambda: (torch.empty(batch, channels, size, size), torch.zeros(batch, dtype=torch.long))  # noqa: E731
    expected = faketensor.step_bytes(_cnn, make_batch).total_mib
    mib, reasons = new_estimator("faketensor", Bins(0, 1, 4)).point_mib(jobs)
    assert reasons == [""] and mib[0] == pytest.approx(expected)  # rebuilt layer for layer
    mib, reasons = new_estimator("memtracker", Bins(0, 1, 4)).point_mib(jobs)
    assert reasons == [""] and mib[0] >= 4 * sum(p.numel() for p in _cnn().parameters()) * 4 / MIB


def test_a_residual_block_is_rebuilt_with_its_shortcut_from_the_block_input():
    # shortcut 1x1 (3 -> 6), then 3x3 (3 -> 6) on the same input, then 3x3 (6 -> 6): counts per sample
    layers = [
        ("conv2d", 6 * 64, 3 * 6 + 6),
        ("conv2d", 6 * 64, 3 * 6 * 9 + 6),
        ("ReLU", 6 * 64, 0),
        ("conv2d", 6 * 64, 6 * 6 * 9 + 6),
        ("adaptive_avg_pool2d", 6, 0),
        ("linear", 4, 7 * 4),
    ]
    model, shape = build_cnn_from_layers(layers, channels=3, size=8)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size[0]) for c in convs] == [
        (3, 6, 1),
        (3, 6, 3),
        (6, 6, 3),
    ]
    assert model.sources[:2] == [0, 0] and model(torch.randn(2, *shape)).shape == (2, 4)


def test_a_cnn_row_that_no_shape_explains_gets_the_reason(tmp_path):
    row = _gpumemnet_cnn_row(_cnn(), 4, 3, 12)
    row["Activations-Params"] = repr([("conv2d", 4 * 8 * 144, 7), ("linear", 20, 100)])
    row["Filename"] = "arch:x_batch:4.out"
    rows = [row, {**row, "Filename": "input_channels:3_input_size:12_batch:4.out"}]
    pd.DataFrame(rows).to_csv(tmp_path / "cnn.csv", index=False)
    jobs = load_jobs(tmp_path / "cnn.csv", "cnn")
    answer = new_estimator("faketensor", Bins(0, 1, 4)).predict(jobs)
    assert (answer.bins == -1).all() and np.isnan(answer.mib).all()
    assert "gives no input channels and size" in answer.reasons[0]
    # (the linear layer's counts do not tell per-batch activations apart: the file is read per sample)
    assert answer.reasons[1].startswith("layer 1 ('conv2d', 4608, 7): no earlier output")


def test_faketensor_rebuilds_gpumemnet_transformer_rows_from_their_names():
    name = (
        "num_classes:7_embedding_size:32_num_layers:2_num_heads:4_ff_hidden_size:48_dropout_rate:0.1"
        "_seq_length:16_input_size:500_num_samples:100_batch_size:4.out"
    )
    frame = pd.DataFrame({"filename": [name], "layers": [[]], "batch_size": [4]})
    mib, reasons = new_estimator("faketensor", Bins(0, 1, 4)).point_mib(Jobs("transformer", frame, "t.csv"))
    # embedding 500 x 32, two layers with a 48-wide feed-forward: weights, gradients, two moments
    assert reasons == [""] and mib[0] * MIB > 4 * 4 * 500 * 32


def test_every_fold_trains_fresh_estimators(toy_jobs):
    made = []

    def factory(name, bins, seed=0, **options):
        estimator = new_estimator(name, bins, seed=seed, **options)
        made.append(estimator)
        fit = estimator.fit
        estimator.fits = 0

        def counting_fit(jobs):
            estimator.fits += 1
            return fit(jobs)

        estimator.fit = counting_fit
        return estimator

    options = {
        "gpumemnet_mlp": {"epochs": 5, "members": 1},
        "gpumemnet_transformer": {"epochs": 2, "members": 1},
    }
    table, predictions = evaluate(
        toy_jobs(),
        Bins(1000, 1000, 5),
        folds=3,
        seed=0,
        options=options,
        faketensor_rows=0,
        timing_rows=1,
        factory=factory,
        estimators=ESTIMATORS[:3] + ("membench",),
    )
    splits = 3 + 3  # k-fold, then 3 architecture groups
    assert len(made) == 4 * splits
    assert len({id(e) for e in made}) == len(made) and all(e.fits == 1 for e in made)
    assert set(table["estimator"]) == {"gpumemnet_mlp", "gpumemnet_transformer", "horus", "membench"}
    assert (predictions.groupby(["split", "estimator"]).size() == 30).all()
    assert (table["max_under"] == 0.02).all()


def test_membench_estimator_learns_the_toy_law_without_under_estimating(toy_jobs):
    # 120 jobs: 80 to train on per fold, 24 of them held out, enough to promise a 10% risk
    jobs = toy_jobs(120)
    table, _ = evaluate(
        jobs,
        Bins(1000, 100, 40),
        folds=3,
        seed=0,
        estimators=("membench",),
        timing_rows=1,
        splits=("kfold",),
        max_under=0.1,
    )
    row = table.iloc[0]
    assert row["accuracy"] >= 0.9 and row["under_rate"] <= 0.05 and row["mae_mib"] < 5
    assert np.isnan(row["grouped_accuracy"])  # the grouped split was not asked for


def _two_phase_jobs(toy_jobs, n: int) -> tuple[Jobs, np.ndarray]:
    """Jobs whose peak is the larger of a backward pass (1400 MiB + weights + four values per
    activation) and an optimizer step (1400 MiB + four copies of the weights), in float32; and
    which of them peak in the backward pass."""
    jobs = toy_jobs(n, seed=1)
    frame = jobs.frame
    params, acts, batch = (
        frame[c].to_numpy(float) for c in ("total_parameters", "total_activations", "batch_size")
    )
    in_backward = params + 4 * acts * batch > 4 * params
    frame["memory_mib"] = 1400 + 4 * np.maximum(params + 4 * acts * batch, 4 * params) / MIB
    return jobs, in_backward


def test_membench_estimator_recovers_a_peak_that_is_the_larger_of_two_phases(toy_jobs):
    jobs, in_backward = _two_phase_jobs(toy_jobs, 200)
    assert 0.2 < in_backward.mean() < 0.8  # both phases set the peak of many jobs
    truth = jobs.frame["memory_mib"].to_numpy()

    estimator = new_estimator("membench", Bins(1000, 100, 40))
    estimator._fit(jobs)
    assert np.abs(estimator.point_mib(jobs)[0] - truth).max() < 1e-6 * truth.max()
    assert estimator.optimizer_coef == pytest.approx([4, 1400])
    # one linear model of the same terms, even with coefficients of any sign, cannot follow the kink
    design = np.column_stack([tensor_terms_mib(jobs), np.ones(len(truth))])
    one_model = np.linalg.lstsq(design, truth, rcond=None)[0]
    assert np.abs(design @ one_model - truth).max() > 0.05 * (truth.max() - 1400)


def test_membench_estimator_keeps_one_linear_model_on_few_jobs(toy_jobs):
    estimator = new_estimator("membench", Bins(1000, 100, 40))
    estimator._fit(_two_phase_jobs(toy_jobs, 30)[0])  # 5 jobs per coefficient: 45 for the backward phase
    assert estimator.optimizer_coef.tolist() == [0.0, 0.0]


def test_faketensor_rebuilds_published_mlp_rows(shared_data):
    jobs = load_jobs(shared_data / "gpumemnet" / "mlp_data_step2.csv", "mlp").subset(np.arange(2))
    mib, reasons = new_estimator("faketensor", Bins(1000, 1000, 5)).point_mib(jobs)
    row = jobs.frame.iloc[0]
    # at least weights, gradients and Adam's two moments of every parameter
    assert mib[0] >= 16 * row["total_parameters"] / 2**20 and reasons == ["", ""]


@pytest.mark.parametrize(
    "layers",
    [
        [("linear", 0, 15)],  # no outputs
        [("linear", 30, 15)],  # fewer parameters than outputs
        [("linear", 3, 15), ("batch_normalization", 0, 0)],  # does not take the 3 outputs
        [("ReLU", 3, 0), ("linear", 2, 8)],  # nothing before the activation
        [("linear", 2**40, 2**40), ("linear", 2**40, 2**40)],  # in range, but no MLP
    ],
)
def test_faketensor_answers_nan_for_a_layer_list_that_is_no_mlp(layers):
    frame = pd.DataFrame(
        {"filename": ["x.out"], "layers": [layers], "batch_size": [4], "input_elements": [4]}
    )
    answer = new_estimator("faketensor", Bins(0, 100, 3)).predict(Jobs("mlp", frame, "x.csv"))
    assert answer.bins.tolist() == [-1] and np.isnan(answer.mib).all() and answer.reasons[0]


def test_faketensor_counts_the_largest_mlp_the_reader_accepts_and_refuses_what_int64_cannot_size():
    # 2**20 samples of 2**40 - 1 inputs: 2**62 bytes, countable.
    big = faketensor.step_bytes(
        lambda: torch.nn.Linear(2**40 - 1, 1),
        lambda: (torch.empty(2**20, 2**40 - 1), torch.zeros(2**20, dtype=torch.long)),
    )
    assert big.total_bytes > 2**62
    with pytest.raises(InputError, match="would hold 2\\*\\*63 bytes or more"):
        faketensor.step_bytes(
            lambda: torch.nn.Linear(2**31, 2**31),
            lambda: (torch.empty(2, 2**31), torch.zeros(2, dtype=torch.long)),
        )
    with pytest.raises(InputError, match="would hold 2\\*\\*63 bytes or more"):
        faketensor.step_bytes(
            lambda: torch.nn.Linear(4, 10**30), lambda: (torch.empty(2, 4), torch.zeros(2, dtype=torch.long))
        )


@pytest.mark.parametrize("family", ["mlp", "cnn", "transformer"])
def test_the_layer_summary_on_meta_stand_ins_equals_a_real_forward_pass(family):
    from membench.memnet.configs import config_of
    from membench.memnet.generate import generate
    from membench.memnet.models import _summary_pass, build_model, example_batch

    ranges = {
        "mlp": {"input": (4, 64), "output": (2, 8), "batch": (4, 8)},
        "cnn": {
            "input": (32, 48),
            "classes": (10, 12),
            "depth": (1, 8),
            "filters": (32, 40),
            "batch": (4, 6),
        },
        "transformer": {"embed": (128, 160), "layers": (2, 3), "seq": (128, 160), "batch": (1, 4)},
    }
    for row in generate(family, 4, seed=3, ranges=ranges[family]).to_dict("records"):
        config = config_of(row, family)
        model = build_model(family, config)
        x, _ = example_batch(family, config, torch.device("cpu"), torch.Generator().manual_seed(0))
        buffers = {name: b.clone() for name, b in model.named_buffers()}
        summary = layer_summary(model, x[:2])
        assert all(torch.equal(buffers[name], b) for name, b in model.named_buffers())  # left as they were
        assert summary == _summary_pass(model, x[:2], on_meta=False)


# Small configurations of each family, for tests that build their models.
SMALL_RANGES = {
    "mlp": {"input": (4, 64), "output": (2, 8), "batch": (4, 8)},
    "cnn": {"input": (16, 24), "classes": (2, 4), "depth": (1, 4), "filters": (8, 16), "batch": (2, 4)},
    "transformer": {"embed": (16, 32), "layers": (2, 5), "seq": (8, 16), "batch": (1, 4)},
}


@pytest.mark.parametrize("family", ["mlp", "cnn", "transformer"])
def test_predict_describes_a_model_as_its_cleaned_measurement_does(family):
    from membench.memnet.clean import clean_records
    from membench.memnet.configs import config_of
    from membench.memnet.dataset import STATUS_OK
    from membench.memnet.generate import generate
    from membench.memnet.models import build_model, example_batch, module_counts
    from membench.memnet.predict import job_of_summary

    configs = generate(family, 4, seed=5, ranges=SMALL_RANGES[family]).to_dict("records")
    typed = pd.DataFrame([{"config_id": row["config_id"], **config_of(row, family)} for row in configs])
    for row in configs:
        config = config_of(row, family)
        model = build_model(family, config)
        x, _ = example_batch(family, config, torch.device("cpu"), torch.Generator().manual_seed(0))
        layers, counts = layer_summary(model, x[:2]), module_counts(model)
        parameters = sum(p.numel() for p in model.parameters())
        record = {"config_id": row["config_id"], "filename": row["filename"], "status": STATUS_OK}
        record |= {"layers": layers, "module_counts": counts, "memory_mib": 1.0}
        record |= {"total_activations": sum(a for _, a, _ in layers), "total_parameters": parameters}
        cleaned = clean_records([record], typed, family)[0].iloc[0]
        dtype, shape = "int64" if family == "transformer" else "float32", tuple(x.shape[1:])
        job = job_of_summary(layers, counts, parameters, shape, dtype, config["batch"], "m", family)
        assert job.frame["depth"].item() == cleaned["Depth"], config
        assert job.frame["activation"].item() == cleaned["Activation Function"], config
        if family == "transformer":
            assert cleaned["Depth"] == config["layers"]  # GPUMemNet's depth: encoder layers


def test_a_model_without_gpumemnets_activations_is_named_identity():
    from membench.memnet.clean import gpumemnet_activation

    assert gpumemnet_activation("mlp", [("linear", 10, 50)]) == "Identity"
    layers = [("linear", 8, 40), ("relu", 8, 0), ("linear", 8, 72), ("Tanh", 8, 0), ("ReLU", 8, 0)]
    assert gpumemnet_activation("mlp", layers) == "ReLU"


class _BranchOnData(torch.nn.Module):
    """A model that reads a value (as a data-dependent model does): it cannot run on meta tensors."""

    def __init__(self):
        super().__init__()
        self.small, self.large = torch.nn.Linear(4, 2), torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.small(x) if x.sum().item() < 0 else self.large(x)


def test_a_model_that_needs_real_values_is_summarised_by_a_real_forward_pass():
    rows = layer_summary(_BranchOnData(), torch.ones(2, 4))
    assert rows == [("linear", 3, 15)]
