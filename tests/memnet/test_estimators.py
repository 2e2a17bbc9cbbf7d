"""Estimators: Horus by hand, FakeTensor against real tensors, fresh models in every fold."""

import numpy as np
import pandas as pd
import pytest
import torch

from membench.core.errors import InputError
from membench.core.tracers import SavedActivationCounter
from membench.memnet import faketensor
from membench.memnet.dataset import Bins, Jobs, load_jobs
from membench.memnet.estimators import ESTIMATORS, Horus, horus_mib, new_estimator
from membench.memnet.evaluate import evaluate


def test_horus_on_a_hand_computed_case():
    # A = 1000 activations per sample, P = 10_000 parameters, B = 32:
    # 4 * ((1000*32 + 10000) + 32*10000) bytes = 4 * 362000 = 1_448_000 bytes = 1.380920... MiB
    assert horus_mib(np.array([1000.0]), np.array([10_000.0]), np.array([32.0]))[0] == pytest.approx(
        1_448_000 / 2**20
    )
    frame = pd.DataFrame({"total_activations": [1000], "total_parameters": [10_000], "batch_size": [32]})
    bins, mib = Horus(Bins(0.0, 1.0, 4)).predict(Jobs("mlp", frame, "x"))
    assert bins[0] == 1 and mib[0] == pytest.approx(1.3809204)


def _small_model():
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))


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


def test_membench_estimator_learns_the_toy_law_without_under_estimating(toy_jobs):
    jobs = toy_jobs(60)
    table, _ = evaluate(jobs, Bins(1000, 100, 40), folds=3, seed=0, estimators=("membench",), timing_rows=1)
    row = table.iloc[0]
    assert row["accuracy"] >= 0.9 and row["under_rate"] <= 0.05 and row["mae_mib"] < 5


def test_faketensor_rebuilds_published_mlp_rows(shared_data):
    jobs = load_jobs(shared_data / "gpumemnet" / "mlp_data_step2.csv", "mlp").subset(np.arange(2))
    bins, mib = new_estimator("faketensor", Bins(1000, 1000, 5)).predict(jobs)
    row = jobs.frame.iloc[0]
    # at least weights, gradients and Adam's two moments of every parameter
    assert mib[0] >= 16 * row["total_parameters"] / 2**20 and (bins >= 0).all()


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
    bins, mib = new_estimator("faketensor", Bins(0, 100, 3)).predict(Jobs("mlp", frame, "x.csv"))
    assert bins.tolist() == [-1] and np.isnan(mib).all()


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
