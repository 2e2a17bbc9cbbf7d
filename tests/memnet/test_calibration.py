"""Split-conformal calibration: the quantile's rank, and the achieved under-estimation rate within
sampling error of the requested one, on synthetic jobs with known noise and on GPUMemNet's MLP data."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from membench.memnet.calibration import (
    ThresholdCalibration,
    binomial_interval,
    calibration_split,
    conformal_lower_quantile,
    conformal_quantile,
    min_calibration_jobs,
)
from membench.memnet.dataset import DEFAULT_BINS, Bins, Jobs, load_jobs
from membench.memnet.estimators import new_estimator
from membench.memnet.evaluate import split_indices, true_bins

SHIPPED_MLP = Path(__file__).resolve().parents[2] / "resources" / "gpumemnet" / "mlp_data_step2.csv.gz"


def _sampling_error(rate: float, calibration_jobs: int, test_jobs: int) -> float:
    """Three standard deviations of an achieved rate: the calibration set's draw (the coverage of
    a split-conformal margin is a Beta variable of spread ~ sqrt(rate(1-rate)/n_cal)), the test
    set's draw (binomial), plus the quantile's discreteness 1/(n_cal + 1)."""
    spread = math.sqrt(rate * (1 - rate))
    return 3 * spread * (1 / math.sqrt(calibration_jobs) + 1 / math.sqrt(test_jobs)) + 1 / (
        calibration_jobs + 1
    )


def test_the_conformal_quantile_takes_the_finite_sample_rank():
    scores = np.arange(1.0, 11.0)[::-1]  # 10 scores, 1 .. 10, in any order
    # ceil((10 + 1)(1 - 0.2)) = 9: the 9th smallest
    assert conformal_quantile(scores, 0.2) == 9.0
    # ceil(11 x 0.95) = 11 > 10 scores: no finite margin is guaranteed
    assert conformal_quantile(scores, 0.05) == math.inf
    # floor(11 x 0.2) = 2: the 2nd smallest; floor(11 x 0.05) = 0: none
    assert (
        conformal_lower_quantile(scores, 0.2) == 2.0 and conformal_lower_quantile(scores, 0.05) == -math.inf
    )
    assert min_calibration_jobs(0.02) == 49
    assert (
        conformal_quantile(np.zeros(48), 0.02) == math.inf and conformal_quantile(np.zeros(49), 0.02) == 0.0
    )


def test_the_calibration_split_is_disjoint_seeded_and_keeps_one_job_each_way():
    fit, calibrate = calibration_split(100, 0.3, seed=4)
    assert len(calibrate) == 30 and len(np.intersect1d(fit, calibrate)) == 0
    assert sorted(np.concatenate([fit, calibrate])) == list(range(100))
    assert (calibration_split(100, 0.3, seed=4)[1] == calibrate).all()
    assert [len(part) for part in calibration_split(2, 0.01, 0)] == [1, 1]
    assert [len(part) for part in calibration_split(1, 0.5, 0)] == [1, 0]


def test_the_binomial_interval_is_clopper_pearsons():
    low, high = binomial_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / 10))
    low, high = binomial_interval(5, 100)
    assert low < 0.05 < high and high == pytest.approx(0.1128, abs=1e-4)


def _noisy_jobs(n: int, seed: int) -> Jobs:
    """MLP-like jobs whose peak is a known law of their tensors (1000 MiB + 4 (4 P + A B) bytes)
    plus Gaussian noise of 5% of the tensor part: the estimator sees the law, never the noise."""
    rng = np.random.default_rng(seed)
    acts, params, batch = (
        rng.integers(1000, 50_000, n),
        rng.integers(10**5, 10**7, n),
        rng.integers(4, 512, n),
    )
    tensors = 4 * (4 * params + acts * batch) / 2**20
    memory = 1000 + tensors * (1 + 0.05 * rng.standard_normal(n))
    frame = pd.DataFrame(
        {
            "filename": [f"j{i}" for i in range(n)],
            "group": "all",
            "depth": 1,
            "batch_size": batch,
            "total_activations": acts,
            "total_parameters": params,
            "input_elements": 10,
            "activation": "ReLU",
            "layers": [[("linear", int(a), int(p))] for a, p in zip(acts, params)],
            "oom": False,
            "memory_mib": memory,
            "batchnorm_layers": 0,
            "dropout_layers": 0,
        }
    )
    return Jobs("mlp", frame, "synthetic")


@pytest.mark.parametrize("max_under", [0.02, 0.1])
def test_on_jobs_with_known_noise_the_achieved_rate_is_the_requested_one(max_under):
    train, test = _noisy_jobs(3000, seed=1), _noisy_jobs(20_000, seed=2)
    # 10 MiB classes: narrower than the noise, so the uncalibrated estimate is often too low
    bins = Bins(1000.0, 10.0, 400)
    estimator = new_estimator("membench", bins, max_under=max_under, calibration_fraction=0.3)
    estimator.fit(train)
    answer = estimator.predict(test)
    truth = true_bins(test, bins)
    memory = test.frame["memory_mib"].to_numpy()
    error = _sampling_error(max_under, len(estimator.calibration), len(test))
    assert (answer.raw_bins < truth).mean() > 1.5 * max_under  # calibration has work to do
    assert abs((answer.bins < truth).mean() - max_under) < error
    assert abs((memory > answer.high_mib).mean() - max_under) < error
    assert abs((memory < answer.low_mib).mean() - max_under) < error


def test_a_calibrated_threshold_on_overconfident_probabilities_holds_the_rate():
    rng = np.random.default_rng(0)
    classes, n_cal, n_test, max_under = 5, 2000, 20_000, 0.05

    def draw(n):
        # The true class distribution of each job is a random softmax; the classifier reports it
        # sharpened (overconfident), so its own 1 - alpha threshold would under-estimate too often.
        logits = rng.normal(0, 1.5, (n, classes))
        truth = np.array(
            [rng.choice(classes, p=p) for p in np.exp(logits) / np.exp(logits).sum(1, keepdims=True)]
        )
        sharp = np.exp(3 * logits)
        return sharp / sharp.sum(1, keepdims=True), truth

    calibration = ThresholdCalibration.from_probabilities(*draw(n_cal))
    probabilities, truth = draw(n_test)
    nominal = ThresholdCalibration.classes(probabilities, 1 - max_under)
    calibrated = ThresholdCalibration.classes(probabilities, calibration.threshold(max_under))
    assert (nominal < truth).mean() > 1.5 * max_under
    assert abs((calibrated < truth).mean() - max_under) < _sampling_error(max_under, n_cal, n_test)


@pytest.fixture(scope="module")
def shipped_mlp():
    return load_jobs(SHIPPED_MLP, "mlp")


@pytest.fixture(scope="module")
def shipped_folds(shipped_mlp):
    """The membench estimator's 3-fold answers on GPUMemNet's MLP data at 2% requested risk."""
    bins = DEFAULT_BINS["mlp"]
    labels = true_bins(shipped_mlp, bins)
    answers, truths, memory, calibration_jobs = [], [], [], []
    for train, test in split_indices(shipped_mlp, labels, "kfold", 3, seed=0):
        estimator = new_estimator("membench", bins, max_under=0.02)
        estimator.fit(shipped_mlp.subset(train))
        answers.append(estimator.predict(shipped_mlp.subset(test)))
        truths.append(labels[test])
        memory.append(shipped_mlp.frame["memory_mib"].to_numpy()[test])
        calibration_jobs.append(len(estimator.calibration))
    return answers, np.concatenate(truths), np.concatenate(memory), min(calibration_jobs)


def test_on_gpumemnet_mlp_data_the_recommended_mib_holds_the_requested_rate(shipped_folds):
    answers, _, memory, calibration_jobs = shipped_folds
    high = np.concatenate([a.high_mib for a in answers])
    error = _sampling_error(0.02, calibration_jobs, len(memory))
    assert abs((memory > high).mean() - 0.02) < error


def test_on_gpumemnet_mlp_data_the_classes_meet_the_target_within_the_rate(shipped_folds):
    answers, truth, _, calibration_jobs = shipped_folds
    predicted = np.concatenate([a.bins for a in answers])
    under = (predicted < truth).mean()
    # Never above the requested rate beyond sampling error; the target: >= 0.99 accurate, <= 0.5% under.
    assert under <= 0.02 + _sampling_error(0.02, calibration_jobs, len(truth))
    assert (predicted == truth).mean() >= 0.99 and under <= 0.005


def test_the_shipped_copy_is_gpumemnets_data(shipped_mlp, shared_data):
    published = load_jobs(shared_data / "gpumemnet" / "mlp_data_step2.csv", "mlp")
    pd.testing.assert_frame_equal(shipped_mlp.frame, published.frame)
