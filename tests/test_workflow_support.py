"""Scheduler requests, launcher lines and variant names the rules take from membench.workflow_support."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from membench import cli
from membench import workflow_support as ws
from membench.appclass.bench import BenchSpec
from membench.appclass.options import formula_bytes
from membench.core.config import check_config, load_schema
from membench.robust.plan import plan_runs

# The GPU acceptance machine runs the test suite without Snakemake (.ci/gpu-acceptance).
validate = pytest.importorskip("snakemake.utils").validate

REPO = Path(__file__).resolve().parents[1]

HOTCONV = {
    "batch_size": 16,
    "max_len": 2**21,
    "num_workers": 2,
    "stride": 512,
    "num_filters": 128,
    "epochs": 10,
}


@pytest.mark.parametrize(
    "variant",
    [
        {"implementation": "reference", "device": "cpu", "threads": 1, "precision": "float64"},
        {"implementation": "torch", "device": "cuda", "threads": 16, "precision": "float32"},
        {
            "implementation": "torch",
            "device": "cpu",
            "threads": 2,
            "precision": "float64",
            "kernels": "torch",
        },
        {"implementation": "torch", "device": "cpu", "threads": 2, "precision": "float64", "kernels": "auto"},
    ],
)
def test_variant_name_is_the_one_bench_jobs_record(variant):
    assert ws.appclass_variant_name(variant) == BenchSpec(**variant).variant


def test_appclass_memory_grows_with_graph_and_pattern():
    small = ws.appclass_mem_mb(
        {"source": "rmat", "scale": 6, "edge_factor": 4}, {"source": "induced", "max_pattern_nodes": 4}
    )
    large = ws.appclass_mem_mb(
        {"source": "rmat", "scale": 18, "edge_factor": 16}, {"source": "induced", "max_pattern_nodes": 4}
    )
    assert 1000 <= small < 1010
    # 2**18 + 1 nodes, 2**22 edges, a pattern of 4 nodes and 12 edges: the measurements' formula,
    # three times over
    assert large == int(1000 + 3 * formula_bytes(2**18 + 1, 16 * 2**18, 4, 12) / 2**20)


def test_appclass_memory_reads_pnnl_headers_and_guesses_for_unreadable_files(tmp_path):
    vertices, edges, pattern_vertices, pattern = (
        tmp_path / name for name in ("v.txt", "e.txt", "pv.txt", "p.txt")
    )
    vertices.write_text("100 x\n")
    edges.write_text("400 x\n")
    pattern_vertices.write_text("5 x\n")
    pattern.write_text("8 x\n")
    graph = {"source": "files", "vertices": str(vertices), "edges": str(edges)}
    read = ws.appclass_mem_mb(
        graph, {"source": "files", "vertices": str(pattern_vertices), "edges": str(pattern)}
    )
    assert read == int(1000 + 3 * formula_bytes(100, 400, 5, 8) / 2**20)
    missing = ws.appclass_mem_mb(
        {"source": "files", "vertices": str(tmp_path / "none"), "edges": str(edges)},
        {"source": "files", "vertices": str(tmp_path / "none"), "edges": str(tmp_path / "none")},
    )
    assert missing > read
    assert ws.pnnl_rows(str(tmp_path / "none"), unreadable=7) == 7
    pattern.write_text("not-a-number\n")
    assert ws.pnnl_rows(str(pattern), unreadable=7) == 7


def test_hotconv_memory_counts_batches_in_flight_and_cpu_activations():
    on_gpu = ws.hotconv_train_mem_mb(HOTCONV, on_cpu=False)
    batch_mib = 16 * 2**21 * 2 / 2**20
    assert on_gpu == int(2000 + batch_mib * (2 + 2 * 2))
    assert ws.hotconv_train_mem_mb(HOTCONV, on_cpu=True) > on_gpu


def test_hotconv_runtime_scales_with_epochs_and_file_length():
    assert ws.hotconv_train_runtime_min(HOTCONV) == 30 + 10 * 60
    assert ws.hotconv_train_runtime_min({**HOTCONV, "max_len": 8192, "epochs": 2}) == 32


def test_division_memory_on_cpu_grows_with_batch_and_is_fixed_on_gpu():
    assert ws.division_job_mem_mb(224, 64, on_gpu=True) == 8000
    assert ws.division_job_mem_mb(16, 4, on_gpu=False) == 2005
    assert ws.division_job_mem_mb(224, 64, on_gpu=False) == int(2000 + 0.005 * 64 * 224**2)


def test_division_training_takes_one_thread_only_in_a_local_run_without_gpu():
    assert ws.division_train_threads(local_cores=2, local_gpus=0) == 1
    assert ws.division_train_threads(local_cores=2, local_gpus=1) == 2
    assert ws.division_train_threads(local_cores=None, local_gpus=0) == 2


def test_launcher_single_process_one_node_and_several_nodes():
    assert ws.division_train_launcher(1, 1, threads=2) == "membench"
    assert (
        ws.division_train_launcher(4, 1, threads=8)
        == "torchrun --standalone --nproc-per-node 4 -m membench.cli"
    )
    words = shlex.split(ws.division_train_launcher(4, 2, threads=8))
    assert words[: words.index("torchrun")] == [
        "srun",
        "--nodes",
        "2",
        "--ntasks",
        "2",
        "--ntasks-per-node",
        "1",
        "--cpus-per-task",
        "8",
    ]
    torchrun = words[words.index("torchrun") :]
    assert (
        torchrun[torchrun.index("--nnodes") + 1] == "2"
        and torchrun[torchrun.index("--nproc-per-node") + 1] == "4"
    )
    assert torchrun[-2:] == ["-m", "membench.cli"]
    assert any(word.endswith(f":{ws.RENDEZVOUS_PORT}") for word in torchrun)


def test_training_resources():
    assert ws.division_train_resources(4, 2, on_gpu=False) == {"gpu": 0}
    assert ws.division_train_resources(4, 1, on_gpu=True) == {"gpu": 4}
    assert ws.division_train_resources(4, 2, on_gpu=True) == {
        "gres": "gpu:4",
        "nodes": 2,
        "tasks": 2,
        "tasks_per_gpu": 0,
        "mpi": "srun",
    }


def test_timing_jobs_claim_every_local_core_and_their_threads_on_a_cluster():
    assert ws.timing_job_threads(1, local_cores=8) == 8
    assert ws.timing_job_threads(16, local_cores=8) == 16
    assert ws.timing_job_threads(4, local_cores=None) == 4


@pytest.mark.parametrize(
    ("visible", "count"), [("", 0), ("0", 1), ("0,1,2", 3), ("-1", 0), ("0,-1,1", 1), ("GPU-a,GPU-b", 2)]
)
def test_local_gpu_count_follows_cuda_visible_devices(monkeypatch, visible, count):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert ws.local_gpu_count() == count
    assert ws.local_gpu_slots() == max(1, count)


def test_local_gpu_count_without_nvml_driver_is_zero(monkeypatch):
    pynvml = pytest.importorskip("pynvml")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    assert ws.local_gpu_count() == 0
    assert ws.local_gpu_slots() == 1


def test_local_gpu_count_asks_nvml(monkeypatch):
    pynvml = pytest.importorskip("pynvml")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    calls = []
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: calls.append("init"))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 2)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: calls.append("shutdown"))
    assert ws.local_gpu_count() == 2
    assert calls == ["init", "shutdown"]


@pytest.mark.parametrize(
    ("main", "dryrun", "lint", "starts"),
    [
        (True, False, False, True),
        (True, True, False, False),
        (True, False, True, False),
        (False, False, False, False),
    ],
)
def test_only_the_process_of_a_run_starts_jobs(main, dryrun, lint, starts):
    workflow = SimpleNamespace(
        is_main_process=main, output_settings=SimpleNamespace(dryrun=dryrun), check_envvars=not lint
    )
    assert ws.starts_jobs(workflow) is starts


# -- command-line options --------------------------------------------------------------------------


def test_cli_options_spell_values_flags_lists_and_leave_none_out():
    words = ws.cli_options(
        {"val_fraction": 0.1, "sort_by_size": False, "trace": True, "search_dir": ["a b", "c"], "limit": None}
    )
    assert words == [
        "--val-fraction",
        "0.1",
        "--no-sort-by-size",
        "--trace",
        "--search-dir",
        "a b",
        "--search-dir",
        "c",
    ]


def test_alternatives_match_the_names_only():
    pattern = ws.alternatives(["a.b", "c"])
    assert re.fullmatch(pattern, "a.b") and re.fullmatch(pattern, "c")
    assert not re.fullmatch(pattern, "axb") and not re.fullmatch(pattern, "a.bc")
    assert not any(re.fullmatch(ws.alternatives([]), name) for name in ("", "x", "(?!x)x"))
    assert ws.alternatives({"a": 1, "b": 2}) == "a|b"


def test_with_source_names_the_entries_of_those_sources_in_order():
    entries = {"a": {"source": "rmat"}, "b": {"source": "files"}, "c": {"source": "rmat"}}
    assert ws.with_source(entries, "rmat") == ["a", "c"]
    assert ws.with_source(entries, "files", "rmat") == ["a", "b", "c"]
    assert ws.with_source(entries, "induced") == []


def _subcommand_options(command: str) -> set[str]:
    """The option strings ``membench <command>`` takes (``--no-x`` for each ``--x`` flag too)."""
    group, step = command.split()
    parser = importlib.import_module(cli.GROUPS[group][0]).build_parser(f"membench {group}")
    (steps,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return {option for action in steps.choices[step]._actions for option in action.option_strings}


def _completed(path: Path) -> dict:
    config = yaml.safe_load(path.read_text())
    check_config(config, load_schema(REPO / "config" / "schema.yaml"))
    validate(config, str(REPO / "config" / "schema.yaml"))
    return config


CONFIGS = [
    REPO / "config" / "config.yaml",
    REPO / "tests" / "workflow" / "config.yaml",
    *sorted((REPO / "config" / "paper").glob("*.yaml")),
]


def _built_options(config: dict) -> dict[str, list[list[str]]]:
    """Every option list the builders make from ``config``, by the command that takes it."""
    meter, device, seed = config["meter"], config["device"], config["seed"]
    bodmas, images, appclass = config["bodmas"]["datasets"], config["images"]["datasets"], config["appclass"]
    division, hotconv, memnet = config["division"], config["hotconv"], config["memnet"]
    families = ws.memnet_measured_families(memnet)
    built = {
        "bodmas fold": [ws.bodmas_fold_options(spec, seed) for spec in bodmas.values()],
        "bodmas synthetic": [ws.bodmas_synthetic_options(spec, seed) for spec in bodmas.values()],
        "bodmas elf": [ws.bodmas_elf_options(spec, seed) for spec in bodmas.values()],
        "images digits": [
            ws.digits_options(spec, seed) for spec in images.values() if spec["source"] == "digits"
        ],
        "appclass generate-rmat": [
            ws.appclass_rmat_options(spec, appclass, seed)
            for spec in appclass["graphs"].values()
            if spec["source"] == "rmat"
        ],
        "appclass bench": [
            ws.appclass_bench_options(variant, appclass, "manifest.json", meter)
            for variant in ws.appclass_variants(appclass["variants"]).values()
        ],
        "hotconv train": [ws.hotconv_train_options(hotconv, meter, device, seed)],
        "hotconv bench": [
            ws.hotconv_sweep_options(hotconv[name], meter, device, seed) for name in ("sweep", "bench")
        ],
        "division memory": [
            ws.division_job_options(division, "memory", "manifest.json", meter, device, seed)
        ],
        "division speed": [ws.division_job_options(division, "speed", "manifest.json", meter, device, seed)],
        "division maxbatch": [ws.division_job_options(division, "max_batch", None, meter, device, seed)],
        "division train": [ws.division_train_options(division, "manifest.json", meter, device, seed)],
        "memnet generate": [
            ws.memnet_generate_options(memnet["families"][family], seed) for family in families
        ],
        "memnet measure": [ws.memnet_measure_options(memnet, meter, device)],
        "memnet evaluate": [
            ws.memnet_estimator_options(
                memnet, "mlp", {"start_mib": 0, "width_mib": 1, "count": 4}, seed, evaluate=True
            )
        ],
        "memnet train": [ws.memnet_estimator_options(memnet, "mlp", None, seed, evaluate=False)],
    }
    if config["robust"]["enabled"]:
        built["robust train"] = [
            ws.robust_train_options(options, meter, device, seed)
            for options in plan_runs(config["robust"]).values()
        ]
    return built


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.stem)
def test_every_option_a_builder_writes_is_one_its_command_takes(path):
    for command, option_lists in _built_options(_completed(path)).items():
        known = _subcommand_options(command)
        for words in option_lists:
            options = {word for word in words if word.startswith("--")}
            assert options <= known, f"membench {command} takes no {sorted(options - known)}"


def test_meter_options_and_the_allocator_tracer():
    meter = {"sample_interval_s": 0.05, "grid_intensity_g_per_kwh": 475, "trace_allocator": False}
    assert ws.meter_options(meter) == ["--sample-interval-s", "0.05", "--grid-intensity-g-per-kwh", "475"]
    assert ws.trace_allocator_option(meter) == ["--no-trace-allocator"]


def test_data_set_options_take_the_entry_and_the_seed():
    elf = {"search_dirs": ["/usr/bin", "/usr/lib"], "max_files": 20, "max_file_bytes": 4096}
    assert ws.bodmas_elf_options(elf, seed=3) == [
        "--search-dir",
        "/usr/bin",
        "--search-dir",
        "/usr/lib",
        "--max-files",
        "20",
        "--max-file-bytes",
        "4096",
        "--seed",
        "3",
    ]
    # A digits key the entry leaves out is the command's default.
    assert ws.digits_options({"image_size": 16}, seed=0) == ["--image-size", "16", "--seed", "0"]


def test_appclass_variants_put_the_reference_first_and_build_only_for_kernels():
    torch = {"implementation": "torch", "device": "cpu", "threads": 2, "precision": "float32"}
    variants = ws.appclass_variants([torch, {**torch, "kernels": "torch", "threads": 1}])
    assert list(variants) == [
        "reference-cpu-t1-float64",
        "torch-cpu-t2-float32",
        "torch-cpu-t1-float32-kernels_torch",
    ]
    assert [ws.appclass_uses_build(variant) for variant in variants.values()] == [False, True, False]
    appclass, meter = (
        {"repeats": 2, "trace_live_tensors": True},
        {"sample_interval_s": 0.05, "grid_intensity_g_per_kwh": 475, "trace_allocator": True},
    )
    reference = ws.appclass_bench_options(variants["reference-cpu-t1-float64"], appclass, None, meter)
    assert "--build-manifest" not in reference and "--no-trace-live-tensors" in reference
    fast = ws.appclass_bench_options(torch, appclass, "results/build/appclass/manifest.json", meter)
    assert fast[fast.index("--build-manifest") + 1] == "results/build/appclass/manifest.json"
    assert "--trace-live-tensors" in fast and fast[-1] == "--trace-allocator"


def test_appclass_memory_is_the_full_formula_of_the_measurements(tmp_path):
    # 1000 data nodes of one edge each and a 40-node pattern: the data nodes x pattern nodes term
    # (2 of them) is most of the formula, and the estimate counts it.
    graph = {"source": "rmat", "scale": 10, "edge_factor": 1}
    pattern = {"source": "induced", "max_pattern_nodes": 40}
    nodes, edges, pattern_nodes, pattern_edges = 2**10 + 1, 2**10, 40, 160
    full = formula_bytes(nodes, edges, pattern_nodes, pattern_edges, itemsize=8)
    assert ws.appclass_mem_mb(graph, pattern) == int(1000 + 3 * full / 2**20)
    assert full > 8 * 3 * (nodes + edges) * pattern_edges
    vertices, edges_file = tmp_path / "p.Vertex.csv", tmp_path / "p.Edges.csv"
    vertices.write_text("40 x\n")
    edges_file.write_text("160 x\n")
    from_files = {"source": "files", "vertices": str(vertices), "edges": str(edges_file)}
    assert ws.appclass_mem_mb(graph, from_files) == ws.appclass_mem_mb(graph, pattern)


def test_hotconv_sweep_points_of_the_paper_model_ask_for_more():
    assert ws.hotconv_sweep_point_mem_mb("sweep") < ws.hotconv_sweep_point_mem_mb("bench")
    assert ws.hotconv_sweep_point_runtime_min("sweep") < ws.hotconv_sweep_point_runtime_min("bench")


def test_division_options_name_the_build_only_where_the_jobs_load_it():
    config = _completed(REPO / "tests" / "workflow" / "config.yaml")
    division, meter = config["division"], config["meter"]
    built = ws.division_job_options(
        division, "memory", "results/build/division/manifest.json", meter, "cpu", 0
    )
    assert built[built.index("--build-manifest") + 1] == "results/build/division/manifest.json"
    assert built[built.index("--image-size") + 1] == str(division["memory"]["image_size"])
    assert "--build-manifest" not in ws.division_train_options(division, None, meter, "cpu", 0)
    train = ws.division_train_options(division, None, meter, "cuda", 7)
    assert train[train.index("--device") + 1] == "cuda" and train[train.index("--seed") + 1] == "7"


def test_robust_runs_ask_for_their_minutes_and_gpus():
    sequential = {"mode": "sequential", "transport": "shared_memory", "producers": 0, "attack_steps": 10}
    parallel = {"mode": "parallel", "transport": "distributed", "producers": 3, "attack_steps": 5}
    assert ws.robust_run_minutes({"dataset": "digits", "epochs": 6}, sequential) == 10 + 6 * 10
    assert ws.robust_run_minutes({"dataset": "cifar10", "epochs": 2}, parallel) == 10 + 2 * 15 * 5
    assert ws.robust_run_gpus(sequential, gpus=1) == 1 and ws.robust_run_gpus(parallel, gpus=1) == 4
    assert ws.robust_run_gpus(parallel, gpus=0) == 0
    assert (
        ws.robust_nodes_gres(parallel, nodes=3) == "gpu:2"
        and ws.robust_nodes_gres(parallel, nodes=2) == "gpu:2"
    )


def test_memnet_families_options_and_measurement_time():
    memnet = {
        "families": {"mlp": {"count": 6, "ranges": {"depth": [1, 2]}}, "cnn": {"count": 0}},
        "timeout_s": 600,
        "folds": 3,
        "faketensor_rows": 2,
        "timing_rows": 1,
        "max_under": 0.05,
        "calibration_fraction": 0.3,
        "splits": ["kfold"],
        "members": 1,
        "mlp_epochs": 5,
        "transformer_epochs": 2,
        "optimizer": "adam",
        "shipped": ["gpumemnet_mlp"],
        "published": {"own": {"path": "own.csv", "family": "cnn", "device_name": "H100"}},
    }
    assert ws.memnet_measured_families(memnet) == ["mlp"]
    assert ws.memnet_generate_options(memnet["families"]["mlp"], seed=1) == [
        "--count",
        "6",
        "--seed",
        "1",
        "--range",
        "depth",
        "1",
        "2",
    ]
    assert ws.memnet_measure_runtime_min(memnet) == 10 + 6 * 10
    assert ws.memnet_measure_runtime_min({**memnet, "families": {}}) == 10
    evaluate = ws.memnet_estimator_options(
        memnet, "mlp", {"start_mib": 0, "width_mib": 0.5, "count": 4}, 0, True
    )
    assert evaluate[:6] == ["--family", "mlp", "--bins", "0", "0.5", "4"] and "--folds" in evaluate
    assert evaluate[-2:] == ["--splits", "kfold"] and evaluate[evaluate.index("--max-under") + 1] == "0.05"
    train = ws.memnet_estimator_options(memnet, "cnn", None, 0, evaluate=False, device_name="H100")
    assert train[:4] == ["--family", "cnn", "--device-name", "H100"]
    assert "--bins" not in train and "--folds" not in train and "--splits" not in train
    datasets = ws.memnet_datasets(memnet)
    assert list(datasets) == ["measured_mlp", "gpumemnet_mlp", "own"]
    assert datasets["gpumemnet_mlp"]["resource"] == "resources/gpumemnet/mlp_data_step2.csv.gz"
    assert datasets["own"]["device_name"] == "H100" and datasets["measured_mlp"]["device_name"] is None
