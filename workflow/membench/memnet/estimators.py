"""Memory estimators side by side: GPUMemNet's two ensemble classifiers, the Horus formula, a
FakeTensor count, and membench's tensor-bytes regression.

Every estimator has ``fit(jobs)`` (a no-op for the analytic ones) and ``predict(jobs)`` returning
``(bins, mib)``: the predicted memory class of each job and, where the estimator predicts MiB, the
MiB (else ``None``). :func:`new_estimator` builds a fresh, untrained one: evaluation calls it in
every fold, so no fold sees a model trained on another fold's test jobs.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from membench.core import atomic
from membench.core.errors import InputError
from membench.core.seeding import seeded
from membench.core.validate import open_regular, read_json_object
from membench.memnet import faketensor
from membench.memnet.dataset import Bins, Jobs, activation_code, filename_tokens
from membench.memnet.models import build_mlp_from_layers, build_model, config_from_tokens, example_batch

__all__ = [
    "BYTES_PER_VALUE",
    "EnsembleClassifier",
    "ESTIMATORS",
    "FakeTensor",
    "gpumemnet_features",
    "Horus",
    "horus_mib",
    "load_estimators",
    "MIB",
    "new_estimator",
    "save_estimators",
    "tensor_terms_mib",
    "TensorBytesRegression",
]

MIB = 2**20
BYTES_PER_VALUE = 4  # float32 training
ESTIMATORS = ("gpumemnet_mlp", "gpumemnet_transformer", "horus", "faketensor", "membench")


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


def _layer_kind(name: str) -> str:
    key = name.lower()
    if key in ("linear", "conv2d", "nondynamicallyquantizablelinear", "multiheadattention"):
        return "weight"
    if "norm" in key or key == "batch_normalization":
        return "norm"
    return "dropout" if key == "dropout" else "other"


def tensor_terms_mib(jobs: Jobs) -> np.ndarray:
    """What the tensors of a training step scale with, in MiB of float32: parameters (weights,
    gradients, optimizer state); activations x batch, in total and by the kind of layer that
    produced them (weight layers, norms, dropout: each saves a different share for backward); the
    largest layer's activations x batch (transient gradients); input elements x batch."""
    f = jobs.frame
    batch = f["batch_size"].to_numpy(float)
    kinds = ("weight", "norm", "dropout")
    by_kind = np.array(
        [
            [sum(a for n, a, _ in layers if _layer_kind(n) == k) for k in kinds]
            + [max((a for _, a, _ in layers), default=0)]
            for layers in f["layers"]
        ],
        dtype=float,
    ).reshape(len(f), 4)
    return (
        np.column_stack(
            [
                f["total_parameters"].to_numpy(float),
                f["total_activations"].to_numpy(float) * batch,
                by_kind * batch[:, None],
                f["input_elements"].to_numpy(float) * batch,
            ]
        )
        * BYTES_PER_VALUE
        / MIB
    )


class Horus:
    """The Horus formula as GPUMemNet applied it: MiB = 4 ((A B + P) + B P) / 2^20 with A the
    activations per sample, P the parameters, B the batch size."""

    name = "horus"

    def __init__(self, bins: Bins, **_) -> None:
        self.bins = bins

    def fit(self, jobs: Jobs) -> None:
        """Nothing to learn."""

    def predict(self, jobs: Jobs):
        f = jobs.frame
        a, p, b = (f[c].to_numpy(float) for c in ("total_activations", "total_parameters", "batch_size"))
        mib = horus_mib(a, p, b)
        return self.bins.label(mib), mib

    def state(self) -> dict:
        return {}


def horus_mib(activations: np.ndarray, parameters: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """Horus's estimate in MiB (float32: 4 bytes a value)."""
    return 4 * ((activations * batch + parameters) + batch * parameters) / MIB


class FakeTensor:
    """One training step under ``FakeTensorMode``: parameters + gradients + optimizer state + saved
    activations, in MiB. Jobs whose model cannot be rebuilt from the row, or whose tensors could
    not exist (2**63 bytes or more), get NaN."""

    name = "faketensor"

    def __init__(self, bins: Bins, optimizer: str = "adam", **_) -> None:
        self.bins = bins
        self.optimizer = optimizer

    def fit(self, jobs: Jobs) -> None:
        """Nothing to learn."""

    def predict(self, jobs: Jobs):
        mib = np.array([self._row_mib(jobs.family, row) for row in jobs.frame.itertuples()], dtype=float)
        bins = np.where(np.isnan(mib), -1, self.bins.label(np.nan_to_num(mib)))
        return bins, mib

    def _row_mib(self, family: str, row) -> float:
        try:
            if family == "mlp" and row.layers:
                return faketensor.step_bytes(
                    lambda: build_mlp_from_layers(row.layers)[0],
                    lambda: (
                        torch.empty(row.batch_size, row.input_elements),
                        torch.zeros(row.batch_size, dtype=torch.long),
                    ),
                    self.optimizer,
                ).total_mib
            config = config_from_tokens(family, filename_tokens(row.filename))
            return faketensor.step_bytes(
                lambda: build_model(family, config), lambda: example_batch(family, config), self.optimizer
            ).total_mib
        except InputError:
            return float("nan")

    def state(self) -> dict:
        return {}


class TensorBytesRegression:
    """membench's estimator: a non-negative linear model of the measured MiB on the tensor terms
    (:func:`tensor_terms_mib`) plus a constant (CUDA context, allocator slack), fitted by least
    squares on successful jobs; the class is taken from the prediction raised by the ``quantile``
    of the training residuals, so under-estimation (the OOM risk) stays rare."""

    name = "membench"

    def __init__(self, bins: Bins, quantile: float = 0.7, **_) -> None:
        self.bins = bins
        self.quantile = quantile
        self.coef = np.zeros(7)
        self.intercept_mib = 0.0
        self.margin_mib = 0.0

    def fit(self, jobs: Jobs) -> None:
        from sklearn.linear_model import LinearRegression

        ok = ~jobs.frame["oom"].to_numpy()
        x, y = tensor_terms_mib(jobs)[ok], jobs.frame["memory_mib"].to_numpy(float)[ok]
        if len(y) == 0:
            return
        model = LinearRegression(positive=True).fit(x, y)
        self.coef, self.intercept_mib = model.coef_.astype(float), float(model.intercept_)
        self.margin_mib = float(np.quantile(y - self.mib(x), self.quantile))

    def mib(self, terms: np.ndarray) -> np.ndarray:
        return terms @ self.coef + self.intercept_mib

    def predict(self, jobs: Jobs):
        mib = self.mib(tensor_terms_mib(jobs))
        return self.bins.label(mib + self.margin_mib), mib

    def state(self) -> dict:
        return {
            "coef": self.coef.tolist(),
            "intercept_mib": self.intercept_mib,
            "margin_mib": self.margin_mib,
        }

    def load_state(self, state: dict) -> None:
        self.coef = np.asarray(state["coef"], dtype=float)
        self.intercept_mib, self.margin_mib = float(state["intercept_mib"]), float(state["margin_mib"])


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
    features as tokens) trained with different seeds on standardised features; the class is the
    argmax of their mean probabilities. Full-batch Adam, ``epochs`` steps, seeded."""

    def __init__(
        self, bins: Bins, kind: str, seed: int = 0, members: int = 3, epochs: int = 200, **_
    ) -> None:
        self.bins, self.kind, self.seed, self.members, self.epochs = bins, kind, seed, members, epochs
        self.name = f"gpumemnet_{kind}"
        self.nets: list[nn.Module] = []
        self.mean = self.std = None

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

    def fit(self, jobs: Jobs) -> None:
        features = gpumemnet_features(jobs)
        self.mean, self.std = features.mean(axis=0), features.std(axis=0) + 1e-6
        x = self._scaled(jobs)
        memory = np.where(jobs.frame["oom"], np.inf, jobs.frame["memory_mib"])
        y = torch.as_tensor(self.bins.label(np.nan_to_num(memory, posinf=1e18)))
        self.nets = [self._train_member(x, y, member) for member in range(self.members)]

    def _train_member(self, x: torch.Tensor, y: torch.Tensor, member: int) -> nn.Module:
        with seeded(self.seed * 1000 + member):
            net = self._new_net(x.shape[1])
        opt = torch.optim.Adam(net.parameters(), lr=1e-2 if self.kind == "mlp" else 3e-3)
        net.train()
        for _ in range(self.epochs):
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
        net.eval()
        return net

    def predict(self, jobs: Jobs):
        x = self._scaled(jobs)
        with torch.no_grad():
            probs = torch.stack([net(x).softmax(dim=1) for net in self.nets]).mean(dim=0)
        return probs.argmax(dim=1).numpy(), None

    def state(self) -> dict:
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}


def new_estimator(name: str, bins: Bins, seed: int = 0, **options) -> object:
    """A fresh, untrained estimator ``name`` (one of :data:`ESTIMATORS`)."""
    if name == "gpumemnet_mlp":
        return EnsembleClassifier(bins, "mlp", seed=seed, **options.get("gpumemnet_mlp", {}))
    if name == "gpumemnet_transformer":
        return EnsembleClassifier(bins, "transformer", seed=seed, **options.get("gpumemnet_transformer", {}))
    if name == "horus":
        return Horus(bins)
    if name == "faketensor":
        return FakeTensor(bins, optimizer=options.get("optimizer", "adam"))
    if name == "membench":
        return TensorBytesRegression(bins, quantile=options.get("quantile", 0.7))
    raise InputError(None, f"unknown estimator {name!r}; expected one of {', '.join(ESTIMATORS)}")


def save_estimators(directory: str | os.PathLike, family: str, bins: Bins, estimators: list) -> None:
    """Write trained estimators: ``estimators.json`` (bins, scalars) and one ``<name>.pt`` state dict
    per network (read back with ``weights_only=True``)."""
    directory = Path(directory)
    meta = {"family": family, "bins": [bins.start_mib, bins.width_mib, bins.count], "estimators": {}}
    for est in estimators:
        entry = {"state": est.state()}
        if isinstance(est, EnsembleClassifier):
            entry["options"] = {"members": est.members, "epochs": est.epochs, "seed": est.seed}
            with atomic.atomic_path(directory / f"{est.name}.pt", suffix=".pt") as tmp:
                torch.save([net.state_dict() for net in est.nets], tmp)
        meta["estimators"][est.name] = entry
    atomic.write_json(directory / "estimators.json", meta)


def load_estimators(directory: str | os.PathLike) -> tuple[str, Bins, list]:
    """Read what :func:`save_estimators` wrote: (family, bins, trained estimators)."""
    directory = Path(directory)
    path = directory / "estimators.json"
    missing = "trained estimators not found (run `membench memnet train`)"
    meta = read_json_object(path, missing)
    try:
        family, bins = meta["family"], Bins(*meta["bins"])
        estimators = []
        for name, entry in meta["estimators"].items():
            est = new_estimator(name, bins)
            if isinstance(est, EnsembleClassifier):
                est.members, est.epochs, est.seed = (
                    entry["options"][k] for k in ("members", "epochs", "seed")
                )
                est.mean, est.std = np.asarray(entry["state"]["mean"]), np.asarray(entry["state"]["std"])
                with open_regular(directory / f"{name}.pt", missing=missing) as handle:
                    states = torch.load(handle, weights_only=True)
                est.nets = []
                for state in states:
                    net = est._new_net(len(est.mean))
                    net.load_state_dict(state)
                    net.eval()
                    est.nets.append(net)
            elif isinstance(est, TensorBytesRegression):
                est.load_state(entry["state"])
            estimators.append(est)
    except InputError:
        raise  # a weights file missing or not a regular file, named by open_regular
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise InputError(path, f"not a membench estimator directory ({exc})") from None
    return family, bins, estimators
