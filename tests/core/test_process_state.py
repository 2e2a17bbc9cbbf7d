"""Library code leaves process state alone: importing a module, or calling a job's measurement,
changes neither the environment, nor torch's threads, nor the global random state; the command
layer sets them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from membench.cli import ENVIRONMENT

CPU = torch.device("cpu")
QUIRK_GRAPHS = tuple(
    Path(__file__).parents[1] / "appclass" / "data" / name
    for name in (
        "quirkData.Vertex.csv",
        "quirkData.Edges.csv",
        "quirkPattern.Vertex.csv",
        "quirkPattern.Edges.csv",
    )
)

_IMPORT_EVERY_MODULE = """
import importlib, json, os, pkgutil, random, sys
import numpy, sklearn, torch  # sklearn sets KMP_* on import: its own choice, not membench's
import torch._dynamo  # sets TORCHINDUCTOR_CACHE_DIR on import (memnet.predict imports it)
import membench

def state():
    return {"environ": dict(os.environ), "threads": torch.get_num_threads(),
            "torch_rng": torch.get_rng_state().tolist(), "numpy_rng": numpy.random.get_state()[1].tolist(),
            "random": repr(random.getstate())}

changed = {}
for module in pkgutil.walk_packages(membench.__path__, "membench."):
    before = state()
    importlib.import_module(module.name)
    after = state()
    changes = sorted(key for key in before if before[key] != after[key])
    if changes:
        changed[module.name] = changes
print(json.dumps(changed))
"""

_ENVIRONMENT_AT_GROUP_IMPORT = """
import importlib, json, os, sys, types
from membench import cli

seen = {}

def spy(name, package=None):
    if name == cli.GROUPS["appclass"][0]:
        seen.update({"torch imported": "torch" in sys.modules,
                     **{key: os.environ.get(key) for key in cli.ENVIRONMENT["appclass"]}})
    return importlib.import_module(name, package)

cli.importlib = types.SimpleNamespace(import_module=spy)
try:
    cli.main(["appclass", "--help"])
except SystemExit:
    pass
print(json.dumps(seen))
"""


def _environment_without(names) -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in names}


def _declared_names() -> set[str]:
    return {name for environment in ENVIRONMENT.values() for name in environment}


def test_importing_any_membench_module_changes_no_process_state():
    # Without the variables the command layer sets, a module setting one on import would show.
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EVERY_MODULE],
        capture_output=True,
        text=True,
        check=True,
        env=_environment_without(_declared_names()),
        timeout=300,
    )
    assert json.loads(result.stdout.splitlines()[-1]) == {}


def test_a_groups_environment_is_set_before_its_module_and_torch_are_imported():
    # A value the user set is kept.
    environment = {**_environment_without(_declared_names()), "ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}
    result = subprocess.run(
        [sys.executable, "-c", _ENVIRONMENT_AT_GROUP_IMPORT],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
        timeout=300,
    )
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "torch imported": False,
        "OMP_WAIT_POLICY": "PASSIVE",
        "ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
    }


@pytest.fixture
def process_state_kept(monkeypatch):
    """Fails the test when the code under it sets torch's threads or changes the global random state."""
    thread_calls = []
    monkeypatch.setattr(torch, "set_num_threads", thread_calls.append)
    torch.manual_seed(12345)  # a state no seed a library might set would leave
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    yield
    assert thread_calls == [] and torch.get_num_threads() == threads
    assert torch.equal(torch.get_rng_state(), rng)


def _robust_model():
    from membench.robust.models import build_model

    return build_model("mlp", (1, 8, 8), 10, 16, seed=3)


def _robust_training(tmp_path):
    from membench.core.checkpoint import run_identity
    from membench.robust.train import SequentialSource, TrainSettings, train

    generator = torch.Generator().manual_seed(1)
    x, y = torch.rand(16, 1, 8, 8, generator=generator), torch.randint(0, 10, (16,), generator=generator)
    settings = TrainSettings(
        attack="pgd",
        eps=0.1,
        steps=1,
        alpha=0.05,
        epochs=1,
        batch_size=8,
        learning_rate=0.01,
        guard_steps=1,
        guard_samples=8,
    )
    train(
        _robust_model(),
        x,
        y,
        settings,
        SequentialSource(x, y, settings, CPU),
        tmp_path / "checkpoint.pt",
        CPU,
        run_identity({}),
    )


def _ensemble_fit(tmp_path):
    from membench.memnet.dataset import Bins, Jobs
    from membench.memnet.estimators import EnsembleClassifier

    rng = np.random.default_rng(0)
    n = 12
    acts, params = rng.integers(100, 5000, n), rng.integers(1000, 10**6, n)
    frame = pd.DataFrame(
        {
            "filename": [f"j{i}" for i in range(n)],
            "depth": rng.integers(1, 5, n),
            "batch_size": rng.integers(4, 512, n),
            "total_activations": acts,
            "total_parameters": params,
            "input_elements": 10,
            "activation": "ReLU",
            "layers": [[("linear", int(a), int(p))] for a, p in zip(acts, params)],
            "oom": False,
            "memory_mib": rng.uniform(1000, 6000, n),
            "batchnorm_layers": 0,
            "dropout_layers": 0,
        }
    )
    for kind in ("mlp", "transformer"):
        EnsembleClassifier(Bins(1000, 1000, 5), kind, members=2, epochs=2).fit(Jobs("mlp", frame, "toy"))


def _memnet_measurement(tmp_path):
    from membench.memnet.measure import train_steps

    def batch(device, generator):
        return torch.randn(2, 4, generator=generator).to(device), torch.randint(
            0, 3, (2,), generator=generator
        ).to(device)

    train_steps(lambda: nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.5)), batch, CPU, 1, "adam", 0)


def _division_training(tmp_path):
    from membench.core.checkpoint import run_identity
    from membench.core.meter import Meter
    from membench.division.bench import prepare_model
    from membench.division.kernels import TORCH_KERNELS
    from membench.division.options import MethodSpec
    from membench.division.train import TrainSpec, train_model

    generator = torch.Generator().manual_seed(1)
    images = TensorDataset(
        torch.rand(8, 3, 16, 16, generator=generator), torch.randint(0, 10, (8,), generator=generator)
    )
    model, context = prepare_model("resnet18", "division", 10, CPU, MethodSpec(), TORCH_KERNELS, 0, width=4)
    with Meter(CPU, sample_interval_s=0) as meter:
        train_model(
            model,
            context,
            images,
            images,
            TrainSpec(epochs=1, batch_size=4),
            CPU,
            meter,
            tmp_path / "checkpoint.pt",
            run_identity({}),
        )


def _hotconv_point(tmp_path):
    from membench.hotconv.bench import SweepSpec, measure_point

    sweep = SweepSpec(num_filters=8, window_size=32, stride=32, fp_slice_size=256, fp2_slice_size=32, steps=1)
    measure_point(sweep, "malconv", 2, 256, CPU, sample_interval_s=0.0)


def _hotconv_training(tmp_path):
    from membench.data.bodmas.folds import FoldSpec, make_fold, write_classes
    from membench.data.bodmas.synthetic import SyntheticSpec, generate_synthetic
    from membench.hotconv.models import ModelSpec
    from membench.hotconv.train import FoldFiles, TrainSpec, train_job

    generate_synthetic(
        tmp_path,
        SyntheticSpec(samples=24, families=2, min_bytes=256, median_bytes=512, max_bytes=1024, seed=1),
    )
    splits = make_fold(
        tmp_path / "metadata.csv",
        tmp_path / "binaries",
        "tiny",
        1,
        tmp_path / "folds",
        FoldSpec(folds=2, val_fraction=0.2),
    )
    write_classes(tmp_path / "metadata.csv", tmp_path / "folds" / "classes.csv", "binary", 10)
    files = FoldFiles(*map(str, splits), str(tmp_path / "folds" / "classes.csv"), str(tmp_path / "binaries"))
    model = ModelSpec(
        "hotconv_eco", 2, num_filters=8, window_size=16, stride=16, fp_slice_size=256, fp2_slice_size=32
    )
    train_job(
        files,
        model,
        TrainSpec(epochs=1, batch_size=8, max_len=1024, memory_probe_steps=1),
        "tiny",
        1,
        tmp_path / "job",
        CPU,
        sample_interval_s=0.0,
    )


def _meter_check(tmp_path):
    from membench.core.meter_check import run_meter_check

    run_meter_check(CPU, batch_size=2, steps=1, repeats=1, sample_interval_s=0.01)


def _appclass_bench(tmp_path):
    from membench.appclass.bench import BenchSpec, run_bench_job

    spec = BenchSpec(implementation="torch", threads=1, kernels="torch")
    run_bench_job(
        tuple(map(str, QUIRK_GRAPHS)),
        "quirk",
        spec,
        tmp_path / "job",
        sample_interval_s=0,
        trace_allocator=False,
    )


@pytest.mark.parametrize(
    "entry_point",
    [
        _robust_training,
        _ensemble_fit,
        _memnet_measurement,
        _division_training,
        _hotconv_point,
        _hotconv_training,
        _meter_check,
        _appclass_bench,
    ],
    ids=lambda entry_point: entry_point.__name__.strip("_"),
)
def test_a_jobs_measurement_leaves_threads_and_random_state_alone(entry_point, tmp_path, process_state_kept):
    entry_point(tmp_path)


def test_a_kernel_build_leaves_path_as_it_found_it(tmp_path, monkeypatch):
    from membench.division.extension import build_extension

    # Without ninja on PATH the build puts the ninja package's there, for the build only; the
    # compiler fails at once.
    without_ninja = tmp_path / "bin"
    without_ninja.mkdir()
    monkeypatch.setenv("CXX", shutil.which("false"))
    monkeypatch.setenv("PATH", str(without_ninja))
    assert build_extension(tmp_path / "build", cuda="no")["status"] == "failed"
    assert os.environ["PATH"] == str(without_ninja)


def test_a_seeded_model_is_the_same_whatever_the_global_random_state():
    torch.manual_seed(1)
    first = _robust_model()
    torch.manual_seed(2)
    second = _robust_model()
    for a, b in zip(first.state_dict().values(), second.state_dict().values()):
        assert torch.equal(a, b)
