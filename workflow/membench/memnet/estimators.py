"""Memory estimators side by side, each answering at a stated risk of under-estimation.

- ``gpumemnet_mlp``, ``gpumemnet_transformer``: GPUMemNet's ensemble classifiers, with the class
  taken at a calibrated threshold on their cumulative class probabilities.
- ``horus``: the Horus formula as GPUMemNet applied it.
- ``faketensor``: one training step counted on fake tensors.
- ``memtracker``: PyTorch's module-level memory tracker over two steps on fake tensors.
- ``membench``: the larger of two non-negative linear models of the measured MiB, one per phase of a
  training step (forward and backward, on the tensors it holds: :func:`tensor_terms_mib`; the
  optimizer step, on the parameters).

Every estimator has ``fit(jobs)`` and ``predict(jobs, max_under=None)``, which returns
:class:`Predictions`: the class at the requested risk ``max_under`` (the under-estimation rate the
user accepts) and the uncalibrated class, plus MiB where the estimator gives them. ``fit`` sets
the risk by split-conformal calibration (:mod:`membench.memnet.calibration`): the learned
estimators fit on part of the jobs and calibrate on the rest; the analytic ones (nothing to fit)
calibrate on the jobs given. Calibration only raises an answer, never lowers it: an estimator
already safer than asked keeps its answers and achieves a lower rate than requested.
:func:`new_estimator` builds a
fresh, untrained one: evaluation calls it in every fold, so no fold sees a model trained or
calibrated on another fold's test jobs.
``state()`` and :func:`restore_estimator` save and restore a trained one as plain values and
tensors (read back with ``weights_only=True``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from membench.core.errors import InputError
from membench.core.seeding import seeded
from membench.memnet import faketensor
from membench.memnet.calibration import (
    DEFAULT_CALIBRATION_FRACTION,
    DEFAULT_MAX_UNDER,
    MarginCalibration,
    ThresholdCalibration,
    calibration_split,
)
from membench.memnet.dataset import Bins, Jobs, activation_code
from membench.memnet.models import job_model

__all__ = [
    "ANALYTIC",
    "BYTES_PER_VALUE",
    "EnsembleClassifier",
    "ESTIMATORS",
    "FakeTensor",
    "gpumemnet_features",
    "Horus",
    "horus_mib",
    "LEARNED",
    "MemTracker",
    "MIB",
    "new_estimator",
    "Predictions",
    "restore_estimator",
    "saved_elements",
    "tensor_terms_mib",
    "TensorBytesRegression",
]

MIB = 2**20
BYTES_PER_VALUE = 4  # float32 training
ESTIMATORS = ("gpumemnet_mlp", "gpumemnet_transformer", "horus", "faketensor", "memtracker", "membench")
LEARNED = ("gpumemnet_mlp", "gpumemnet_transformer", "membench")
ANALYTIC = ("horus", "faketensor", "memtracker")
# A raise past every class is the last class; this stands in for an infinite margin when binning.
_FAR_MIB = 1e300


@dataclass
class Predictions:
    """An estimator's answers for jobs, one entry per job.

    ``bins``: the class at the requested risk (-1 where the estimator has no answer);
    ``raw_bins``: the uncalibrated class (argmax of the probabilities, or the estimate's class);
    ``mib``: the estimate in MiB (NaN where none; None for classifiers);
    ``low_mib``, ``high_mib``: the range at the requested risk: the peak is above ``high_mib`` (the
    recommended figure) with probability at most the risk, and below ``low_mib`` likewise (``inf``
    / ``-inf`` with too few calibration jobs for the risk);
    ``reasons``: why there is no answer ('' where there is one).
    """

    bins: np.ndarray
    raw_bins: np.ndarray
    mib: np.ndarray | None = None
    low_mib: np.ndarray | None = None
    high_mib: np.ndarray | None = None
    reasons: list[str] = field(default_factory=list)


def gpumemnet_features(jobs: Jobs) -> np.ndarray:
    """The features GPUMemNet's classifiers read for the family (float64, jobs x features)."""
    f = jobs.frame
    acts_batch = f["total_activations"] * f["batch_size"]
    if jobs.family == "mlp":
        columns = [
            f["depth"],
            f["batch_size"],
            f["total_parameters"],
            f["total_activations"],
            f["batchnorm_layers"],
            f["dropout_layers"],
        ]
    elif jobs.family == "cnn":
        columns = [
            f["depth"],
            f["total_activations"],
            acts_batch,
            f["total_parameters"],
            f["batch_size"],
            f["conv2d_count"],
            f["batchnorm2d_count"],
            f["dropout_count"],
        ]
    else:
        columns = [
            f["depth"],
            f["total_activations"],
            acts_batch,
            f["total_parameters"],
            f["batch_size"],
            f["mha_linear_count"],
            f["linear_count"],
            f["layernorm_count"],
            f["dropout_count"],
        ]
    numeric = np.log1p(np.column_stack([np.asarray(c, dtype=float) for c in columns]))
    if jobs.family == "transformer":
        return numeric
    return np.column_stack([numeric, activation_code(f["activation"])])


# What autograd keeps of a layer for backward, by the layer's name (lower case, no "_"): its input
# (weight layers, norms, most activations), its output (ReLU, Tanh, Sigmoid, Softmax), or a mask
# of one byte per element (dropout). Names not listed keep nothing (views, Identity).
_SAVES_INPUT = {
    "linear",
    "conv2d",
    "nondynamicallyquantizablelinear",
    "batchnormalization",
    "batchnorm1d",
    "batchnorm2d",
    "layernorm",
    "leakyrelu",
    "elu",
    "selu",
    "gelu",
    "silu",
    "mish",
    "softplus",
    "prelu",
    "hardtanh",
    "adaptiveavgpool2d",
    "avgpool2d",
    "maxpool2d",
}
_SAVES_OUTPUT = {"relu", "tanh", "sigmoid", "softmax", "logsoftmax"}
_MASK_FRACTION = {"dropout": 0.25}


def _layer_key(name: str) -> str:
    return name.lower().replace("_", "")


def saved_elements(layers: list[tuple[str, int, int]], input_elements: int) -> float:
    """Values per sample that autograd keeps for backward in a chain of ``layers``: each layer's
    output counted once if the layer keeps it or the next layer keeps it as its input, plus the
    input if the first layer keeps it, plus dropout masks (a quarter of a float each)."""
    kept = {}
    previous = -1
    sizes = {-1: input_elements}
    masks = 0.0
    for i, (name, activations, _) in enumerate(layers):
        key = _layer_key(name)
        sizes[i] = activations
        if key in _SAVES_INPUT:
            kept[previous] = True
        if key in _SAVES_OUTPUT:
            kept[i] = True
        masks += _MASK_FRACTION.get(key, 0.0) * activations
        previous = i
    return float(sum(sizes[i] for i in kept) + masks)


def _kind(name: str) -> str:
    key = _layer_key(name)
    if key in ("linear", "conv2d", "nondynamicallyquantizablelinear", "multiheadattention", "embedding"):
        return "weight"
    if "norm" in key:
        return "norm"
    return "dropout" if key == "dropout" else "other"


TERMS = (
    "parameters",
    "saved_x_batch",
    "activations_x_batch",
    "weight_layer_activations_x_batch",
    "norm_activations_x_batch",
    "dropout_activations_x_batch",
    "largest_layer_x_batch",
    "input_x_batch",
)


def tensor_terms_mib(jobs: Jobs) -> np.ndarray:
    """What the tensors of a training step scale with, in MiB of float32 (jobs x :data:`TERMS`):
    parameters (weights, gradients, optimizer state); the values autograd keeps for backward
    (:func:`saved_elements`) x batch; activations x batch, in total and by the kind of layer that
    produced them (weight layers, norms, dropout); the largest layer's activations x batch
    (transient gradients); input elements x batch."""
    f = jobs.frame
    batch = f["batch_size"].to_numpy(float)
    kinds = ("weight", "norm", "dropout")
    per_sample = np.array(
        [
            [saved_elements(layers, int(inputs))]
            + [sum(a for n, a, _ in layers if _kind(n) == k) for k in kinds]
            + [max((a for _, a, _ in layers), default=0)]
            for layers, inputs in zip(f["layers"], f["input_elements"])
        ],
        dtype=float,
    ).reshape(len(f), 5)
    return (
        np.column_stack(
            [
                f["total_parameters"].to_numpy(float),
                per_sample[:, 0] * batch,
                f["total_activations"].to_numpy(float) * batch,
                per_sample[:, 1:] * batch[:, None],
                f["input_elements"].to_numpy(float) * batch,
            ]
        )
        * BYTES_PER_VALUE
        / MIB
    )


def horus_mib(activations: np.ndarray, parameters: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """Horus's estimate in MiB (float32: 4 bytes a value)."""
    return 4 * ((activations * batch + parameters) + batch * parameters) / MIB


def _far(mib: np.ndarray) -> np.ndarray:
    return np.nan_to_num(mib, nan=0.0, posinf=_FAR_MIB, neginf=-_FAR_MIB)


class _MibEstimator:
    """An estimator answering in MiB: ``estimates(jobs)`` gives (estimate, scale, reasons) and the
    class at the requested risk is that of the estimate raised by a calibrated number of scales
    (:class:`~membench.memnet.calibration.MarginCalibration`)."""

    name = ""
    learned = False

    def __init__(
        self,
        bins: Bins,
        max_under: float = DEFAULT_MAX_UNDER,
        calibration_fraction: float = DEFAULT_CALIBRATION_FRACTION,
        seed: int = 0,
        calibration_rows: int | None = None,
    ) -> None:
        self.bins, self.max_under, self.seed = bins, max_under, seed
        self.calibration_fraction, self.calibration_rows = calibration_fraction, calibration_rows
        self.calibration = MarginCalibration(*(np.zeros(0) for _ in range(3)), np.zeros(0, dtype=bool))

    def point_mib(self, jobs: Jobs) -> tuple[np.ndarray, list[str]]:
        """Each job's estimate in MiB (NaN where there is none) and why there is none ('' else)."""
        raise NotImplementedError

    def scale_of(self, estimate: np.ndarray) -> np.ndarray:
        """The error expected of each estimate, in MiB: here the estimate itself, so that the
        margin is a fraction of it."""
        return np.maximum(np.nan_to_num(estimate, nan=1.0), 1.0)

    def estimates(self, jobs: Jobs) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """(estimate, scale, reasons) of each job."""
        estimate, reasons = self.point_mib(jobs)
        return estimate, self.scale_of(estimate), reasons

    def _fit(self, jobs: Jobs) -> None:
        """Fit on the fitting part (learned estimators)."""

    def fit(self, jobs: Jobs) -> None:
        """Fit on part of ``jobs`` and calibrate on the rest (learned), or calibrate on ``jobs``
        (analytic; at most ``calibration_rows`` of them, drawn with the seed)."""
        if self.learned:
            fit, calibrate = calibration_split(len(jobs), self.calibration_fraction, self.seed)
            self._fit(jobs.subset(fit))
        else:
            calibrate = np.arange(len(jobs))
            if self.calibration_rows is not None and len(calibrate) > self.calibration_rows:
                rng = np.random.default_rng(self.seed)
                calibrate = np.sort(rng.permutation(calibrate)[: self.calibration_rows])
        held = jobs.subset(calibrate)
        estimate, scale, _ = self.estimates(held)
        answered = np.isfinite(estimate)
        frame = held.frame
        self.calibration = MarginCalibration(
            estimate[answered],
            scale[answered],
            frame["memory_mib"].to_numpy(float)[answered],
            frame["oom"].to_numpy(bool)[answered],
        )

    def predict(self, jobs: Jobs, max_under: float | None = None) -> Predictions:
        estimate, reasons = self.point_mib(jobs)
        return self.answer(estimate, reasons, max_under)

    def answer(self, estimate: np.ndarray, reasons: list[str], max_under: float | None = None) -> Predictions:
        """The answers for given estimates (NaN: none), at ``max_under`` (default: the estimator's)."""
        max_under = self.max_under if max_under is None else max_under
        estimate = np.asarray(estimate, dtype=float)
        scale = self.scale_of(estimate)
        answered = np.isfinite(estimate)
        margin = self.calibration.class_margin(self.bins, max_under)
        low, high = self.calibration.mib_range(max_under)
        low, high = min(low, 0.0), max(high, 0.0)  # the range holds the estimate: raise-only, as classes
        with np.errstate(invalid="ignore"):
            raised = estimate + np.where(np.isinf(margin), margin, margin * scale)
            low_mib = estimate + np.where(np.isinf(low), low, low * scale)
            high_mib = estimate + np.where(np.isinf(high), high, high * scale)
        raw = self.bins.label(_far(estimate))
        return Predictions(
            bins=np.where(answered, np.maximum(raw, self.bins.label(_far(raised))), -1),
            raw_bins=np.where(answered, raw, -1),
            mib=estimate,
            low_mib=np.where(answered, low_mib, np.nan),
            high_mib=np.where(answered, high_mib, np.nan),
            reasons=list(reasons),
        )

    def state(self) -> dict:
        return {"calibration": self.calibration.state()}

    def load_state(self, state: dict) -> None:
        self.calibration = MarginCalibration.from_state(state["calibration"])


class Horus(_MibEstimator):
    """The Horus formula as GPUMemNet applied it: MiB = 4 ((A B + P) + B P) / 2^20 with A the
    activations per sample, P the parameters, B the batch size."""

    name = "horus"

    def point_mib(self, jobs: Jobs):
        f = jobs.frame
        a, p, b = (f[c].to_numpy(float) for c in ("total_activations", "total_parameters", "batch_size"))
        return horus_mib(a, p, b), [""] * len(f)


class _FakeStep(_MibEstimator):
    """Rebuilds each job's model from its row (``models.job_model``) and counts its training step
    on fake tensors; a row that cannot be rebuilt gets NaN and the reason."""

    def __init__(self, bins: Bins, optimizer: str = "adam", counts: dict | None = None, **options) -> None:
        super().__init__(bins, **options)
        self.optimizer = optimizer
        # (file name, batch size) -> (MiB, reason): counts already made, shared by the folds of an
        # evaluation (a row's count does not depend on the fold); None counts every row anew.
        self.counts = counts

    def _count_mib(self, build, make_batch) -> float:
        raise NotImplementedError

    def _count_row(self, family: str, row) -> tuple[float, str]:
        try:
            build, make_batch = job_model(family, row.filename, row.layers, int(row.batch_size))
            return self._count_mib(build, make_batch), ""
        except InputError as exc:
            return math.nan, exc.problem

    def point_mib(self, jobs: Jobs):
        answers = []
        for row in jobs.frame.itertuples():
            if self.counts is None:
                answers.append(self._count_row(jobs.family, row))
                continue
            key = (row.filename, int(row.batch_size))
            if key not in self.counts:
                self.counts[key] = self._count_row(jobs.family, row)
            answers.append(self.counts[key])
        return np.array([mib for mib, _ in answers], dtype=float), [reason for _, reason in answers]


class FakeTensor(_FakeStep):
    """One training step under ``FakeTensorMode``: parameters + gradients + optimizer state + saved
    activations, in MiB (:func:`membench.memnet.faketensor.step_bytes`)."""

    name = "faketensor"

    def _count_mib(self, build, make_batch) -> float:
        return faketensor.step_bytes(build, make_batch, self.optimizer).total_mib


class MemTracker(_FakeStep):
    """PyTorch's ``MemTracker`` over two training steps under ``FakeTensorMode``: the peak of all
    live tensors, in MiB (:func:`membench.memnet.faketensor.tracked_peak_bytes`)."""

    name = "memtracker"

    def _count_mib(self, build, make_batch) -> float:
        return faketensor.tracked_peak_bytes(build, make_batch, self.optimizer) / MIB


def _nonnegative_fit(terms: np.ndarray, mib: np.ndarray) -> np.ndarray:
    """Non-negative least squares of ``mib`` on ``terms`` and a constant: (coefficients..., constant)."""
    from scipy.optimize import nnls

    # Columns scaled to unit size, so that the solver weighs MiB and GiB terms alike.
    design = np.column_stack([terms, np.ones(len(mib))])
    norms = np.maximum(np.abs(design).max(axis=0), 1e-12)
    solution, _ = nnls(design / norms, mib)
    return solution / norms


def _phase_mib(
    terms: np.ndarray, backward_coef: np.ndarray, optimizer_coef: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each job's MiB in the forward-backward phase and in the optimizer step."""
    backward = terms @ backward_coef[:-1] + backward_coef[-1]
    return backward, terms[:, TERMS.index("parameters")] * optimizer_coef[0] + optimizer_coef[1]


# Each phase of the two-phase model is fitted only with this many jobs per coefficient it has, so
# that neither is fitted to a handful of jobs; with fewer, one linear model serves every job.
_JOBS_PER_COEFFICIENT = 5
# Rounds of the alternating fit; it usually settles in a few.
_PHASE_ROUNDS = 50


class TensorBytesRegression(_MibEstimator):
    """membench's estimator: a training step's peak is the larger of two phases' memory, each a
    non-negative linear model plus a constant (CUDA context, allocator slack): the forward and
    backward pass, on every tensor term (:func:`tensor_terms_mib`), and the optimizer step, on the
    parameters alone (gradients, optimizer state and its temporaries, once the activations are
    freed). A sum of the terms over-estimates jobs whose peak is the backward pass by the optimizer
    state they never hold at that time, and under-estimates those whose peak is the optimizer step.

    Fitted on the successful jobs of the fitting part by alternating (Magnani and Boyd, "Convex
    piecewise-linear fitting", 2009): each job goes to the phase that predicts more of it (at first,
    the optimizer step takes the quarter of jobs with the most parameters per saved activation),
    and each phase is refitted by non-negative least squares on its jobs, until no job moves. When
    a phase would get fewer than five jobs per coefficient, or the two phases fit worse than one,
    one linear model of every term serves every job. Its scale (the error it expects of a job) is
    ``a + b x estimate``, ``a, b >= 0`` fitted to the absolute residuals there, so that the
    calibrated margin grows with the job."""

    name = "membench"
    learned = True

    def __init__(self, bins: Bins, **options) -> None:
        super().__init__(bins, **options)
        # (coefficient of each term..., constant) of the forward-backward phase, and (coefficient
        # of the parameters, constant) of the optimizer step; zeros leave the first phase alone.
        self.backward_coef = np.zeros(len(TERMS) + 1)
        self.optimizer_coef = np.zeros(2)
        self.scale_coef = np.array([1.0, 0.0])
        self.scale_floor_mib = 1e-6

    def _fit(self, jobs: Jobs) -> None:
        from scipy.optimize import nnls

        ok = ~jobs.frame["oom"].to_numpy()
        x, y = tensor_terms_mib(jobs)[ok], jobs.frame["memory_mib"].to_numpy(float)[ok]
        if len(y) == 0:
            return
        # One linear model (an optimizer step of zeros), or two phases where they fit better.
        fits = [(_nonnegative_fit(x, y), np.zeros(2)), self._fit_phases(x, y)]
        self.backward_coef, self.optimizer_coef = min(
            (fit for fit in fits if fit is not None),
            key=lambda fit: float(np.sum((y - np.maximum(*_phase_mib(x, *fit))) ** 2)),
        )
        estimate = self.mib(x)
        residual = np.abs(y - estimate)
        top = max(float(estimate.max()), 1e-12)
        scale, _ = nnls(np.column_stack([np.ones(len(y)), estimate / top]), residual)
        # A floor keeps every scale positive (a perfect fit leaves no residual to scale by).
        self.scale_floor_mib = max(0.05 * float(residual.mean()), 1e-6)
        self.scale_coef = np.array([scale[0], scale[1] / top])

    @staticmethod
    def _fit_phases(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(forward-backward, optimizer-step) coefficients by the alternating fit, or None where a
        phase gets too few jobs."""
        parameters = x[:, [TERMS.index("parameters")]]
        weight = parameters[:, 0] / np.maximum(x[:, TERMS.index("saved_x_batch")], 1e-12)
        in_optimizer = weight >= np.quantile(weight, 0.75)
        coefficients = (len(TERMS) + 1, 2)
        fits = None
        for _ in range(_PHASE_ROUNDS):
            jobs = ((~in_optimizer).sum(), in_optimizer.sum())
            if any(n < _JOBS_PER_COEFFICIENT * k for n, k in zip(jobs, coefficients)):
                return None
            fits = (
                _nonnegative_fit(x[~in_optimizer], y[~in_optimizer]),
                _nonnegative_fit(parameters[in_optimizer], y[in_optimizer]),
            )
            backward, optimizer = _phase_mib(x, *fits)
            if ((optimizer > backward) == in_optimizer).all():
                break
            in_optimizer = optimizer > backward
        return fits

    def mib(self, terms: np.ndarray) -> np.ndarray:
        """The estimate in MiB of jobs with these :func:`tensor_terms_mib`: the larger phase."""
        return np.maximum(*_phase_mib(terms, self.backward_coef, self.optimizer_coef))

    def point_mib(self, jobs: Jobs):
        return self.mib(tensor_terms_mib(jobs)), [""] * len(jobs)

    def scale_of(self, estimate: np.ndarray) -> np.ndarray:
        return np.maximum(self.scale_coef[0] + self.scale_coef[1] * estimate, self.scale_floor_mib)

    def state(self) -> dict:
        return {
            **super().state(),
            "backward_coef": self.backward_coef.tolist(),
            "optimizer_coef": self.optimizer_coef.tolist(),
            "scale_coef": self.scale_coef.tolist(),
            "scale_floor_mib": self.scale_floor_mib,
        }

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.backward_coef = np.asarray(state["backward_coef"], dtype=float)
        self.optimizer_coef = np.asarray(state["optimizer_coef"], dtype=float)
        self.scale_coef = np.asarray(state["scale_coef"], dtype=float)
        self.scale_floor_mib = float(state["scale_floor_mib"])


class _TokenTransformer(nn.Module):
    """Each feature a token (value x weight + feature embedding), one encoder layer, mean pooling."""

    def __init__(self, features: int, classes: int, width: int = 16) -> None:
        super().__init__()
        self.value = nn.Parameter(torch.randn(features, width) * 0.1)
        self.position = nn.Parameter(torch.randn(features, width) * 0.1)
        layer = nn.TransformerEncoderLayer(width, 2, 2 * width, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.unsqueeze(-1) * self.value + self.position
        return self.head(self.encoder(tokens).mean(dim=1))


class EnsembleClassifier:
    """GPUMemNet's ensemble classifiers: ``members`` networks (MLPs, or small transformers over the
    features as tokens) trained with different seeds on standardised features of the fitting part;
    full-batch Adam, ``epochs`` steps, seeded. The raw class is the argmax of their mean
    probabilities; the class at the requested risk is the smallest whose cumulative probability
    exceeds a threshold calibrated on the held-out part
    (:class:`~membench.memnet.calibration.ThresholdCalibration`)."""

    learned = True

    def __init__(
        self,
        bins: Bins,
        kind: str,
        seed: int = 0,
        members: int = 3,
        epochs: int = 200,
        max_under: float = DEFAULT_MAX_UNDER,
        calibration_fraction: float = DEFAULT_CALIBRATION_FRACTION,
        **_,
    ) -> None:
        self.bins, self.kind, self.seed, self.members, self.epochs = bins, kind, seed, members, epochs
        self.max_under, self.calibration_fraction = max_under, calibration_fraction
        self.name = f"gpumemnet_{kind}"
        self.nets: list[nn.Module] = []
        self.mean = self.std = None
        self.calibration = ThresholdCalibration(np.zeros(0))

    def _new_net(self, features: int) -> nn.Module:
        if self.kind == "mlp":
            return nn.Sequential(
                nn.Linear(features, 64),
                nn.ReLU(),
                nn.Linear(64, 64),
                nn.ReLU(),
                nn.Linear(64, self.bins.count),
            )
        return _TokenTransformer(features, self.bins.count)

    def _scaled(self, jobs: Jobs) -> torch.Tensor:
        return torch.as_tensor((gpumemnet_features(jobs) - self.mean) / self.std, dtype=torch.float32)

    def _labels(self, jobs: Jobs) -> np.ndarray:
        memory = np.where(jobs.frame["oom"], np.inf, jobs.frame["memory_mib"])
        return self.bins.label(np.nan_to_num(memory, posinf=1e18))

    def fit(self, jobs: Jobs) -> None:
        fit, calibrate = calibration_split(len(jobs), self.calibration_fraction, self.seed)
        part = jobs.subset(fit)
        features = gpumemnet_features(part)
        self.mean, self.std = features.mean(axis=0), features.std(axis=0) + 1e-6
        x = self._scaled(part)
        y = torch.as_tensor(self._labels(part))
        self.nets = [self._train_member(x, y, member) for member in range(self.members)]
        held = jobs.subset(calibrate)
        self.calibration = ThresholdCalibration.from_probabilities(
            self.probabilities(held), self._labels(held)
        )

    def _train_member(self, x: torch.Tensor, y: torch.Tensor, member: int) -> nn.Module:
        with seeded(self.seed * 1000 + member):
            net = self._new_net(x.shape[1])
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
        net.train()
        for _ in range(self.epochs):
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
        net.eval()
        return net

    def probabilities(self, jobs: Jobs) -> np.ndarray:
        """Mean class probabilities of the members (jobs x classes, float64)."""
        x = self._scaled(jobs)
        with torch.no_grad():
            probs = torch.stack([net(x).softmax(dim=1) for net in self.nets]).mean(dim=0)
        return probs.double().numpy()

    def predict(self, jobs: Jobs, max_under: float | None = None) -> Predictions:
        max_under = self.max_under if max_under is None else max_under
        probs = self.probabilities(jobs)
        threshold = self.calibration.threshold(max_under)
        raw = probs.argmax(axis=1)
        return Predictions(
            bins=np.maximum(raw, ThresholdCalibration.classes(probs, threshold)),
            raw_bins=raw,
            reasons=[""] * len(jobs),
        )

    def state(self) -> dict:
        return {
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
            "members": self.members,
            "epochs": self.epochs,
            "seed": self.seed,
            "nets": [net.state_dict() for net in self.nets],
            "calibration": self.calibration.state(),
        }

    def load_state(self, state: dict) -> None:
        self.mean, self.std = np.asarray(state["mean"]), np.asarray(state["std"])
        self.members, self.epochs, self.seed = state["members"], state["epochs"], state["seed"]
        self.nets = []
        for weights in state["nets"]:
            net = self._new_net(len(self.mean))
            net.load_state_dict(weights)
            net.eval()
            self.nets.append(net)
        self.calibration = ThresholdCalibration.from_state(state["calibration"])


def new_estimator(
    name: str,
    bins: Bins,
    seed: int = 0,
    max_under: float = DEFAULT_MAX_UNDER,
    calibration_fraction: float = DEFAULT_CALIBRATION_FRACTION,
    **options,
) -> object:
    """A fresh, untrained estimator ``name`` (one of :data:`ESTIMATORS`) answering at ``max_under``.

    ``options``: ``gpumemnet_mlp`` / ``gpumemnet_transformer`` (dicts of ``members``, ``epochs``),
    ``optimizer`` (of FakeTensor's and MemTracker's step), ``calibration_rows`` (jobs FakeTensor and
    MemTracker calibrate on at most), ``counts`` (a dict of FakeTensor's or MemTracker's counts by
    estimator name, to share between estimators built for the same jobs)."""
    risk = {"max_under": max_under, "calibration_fraction": calibration_fraction, "seed": seed}
    if name in ("gpumemnet_mlp", "gpumemnet_transformer"):
        return EnsembleClassifier(bins, name.split("_", 1)[1], **risk, **options.get(name, {}))
    if name == "horus":
        return Horus(bins, **risk)
    if name in ("faketensor", "memtracker"):
        kind = FakeTensor if name == "faketensor" else MemTracker
        return kind(
            bins,
            optimizer=options.get("optimizer", "adam"),
            calibration_rows=options.get("calibration_rows"),
            counts=(options.get("counts") or {}).get(name),
            **risk,
        )
    if name == "membench":
        return TensorBytesRegression(bins, **risk)
    raise InputError(None, f"unknown estimator {name!r}; expected one of {', '.join(ESTIMATORS)}")


def restore_estimator(name: str, bins: Bins, state: dict, max_under: float = DEFAULT_MAX_UNDER) -> object:
    """A trained estimator from its ``state()``."""
    estimator = new_estimator(name, bins, max_under=max_under)
    estimator.load_state(state)
    return estimator
