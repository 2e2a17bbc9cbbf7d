"""Scheduler requests, launcher lines and variant names the rules take from membench.workflow_support."""

from __future__ import annotations

import shlex
from types import SimpleNamespace

import pytest

from membench import workflow_support as ws
from membench.appclass.bench import BenchSpec

HOTCONV = {"batch_size": 16, "max_len": 2**21, "num_workers": 2, "stride": 512, "num_filters": 128, "epochs": 10}


@pytest.mark.parametrize(
    "variant",
    [
        {"implementation": "reference", "device": "cpu", "threads": 1, "precision": "float64"},
        {"implementation": "torch", "device": "cuda", "threads": 16, "precision": "float32"},
    ],
)
def test_variant_name_is_the_one_bench_jobs_record(variant):
    assert ws.appclass_variant_name(variant) == BenchSpec(**variant).variant


def test_appclass_memory_grows_with_graph_and_pattern():
    small = ws.appclass_mem_mb({"source": "rmat", "scale": 6, "edge_factor": 4}, {"source": "induced", "max_pattern_nodes": 4})
    large = ws.appclass_mem_mb({"source": "rmat", "scale": 18, "edge_factor": 16}, {"source": "induced", "max_pattern_nodes": 4})
    assert 1000 <= small < 1010
    # 2**18 + 1 nodes, 2**22 edges, 12 pattern edges (4 nodes): 3 x 8 bytes x (nodes + edges) x 12,
    # three times over
    assert large == int(1000 + 3 * 8 * 3 * (2**18 + 1 + 16 * 2**18) * 12 / 2**20)


def test_appclass_memory_reads_pnnl_headers_and_guesses_for_unreadable_files(tmp_path):
    vertices, edges, pattern = tmp_path / "v.txt", tmp_path / "e.txt", tmp_path / "p.txt"
    vertices.write_text("100 x\n")
    edges.write_text("400 x\n")
    pattern.write_text("8 x\n")
    graph = {"source": "files", "vertices": str(vertices), "edges": str(edges)}
    read = ws.appclass_mem_mb(graph, {"source": "files", "edges": str(pattern)})
    assert read == int(1000 + 3 * 8 * 3 * 500 * 8 / 2**20)
    missing = ws.appclass_mem_mb({"source": "files", "vertices": str(tmp_path / "none"), "edges": str(edges)},
                                 {"source": "files", "edges": str(tmp_path / "none")})
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
    assert ws.division_train_launcher(4, 1, threads=8) == "torchrun --standalone --nproc-per-node 4 -m membench.cli"
    words = shlex.split(ws.division_train_launcher(4, 2, threads=8))
    assert words[: words.index("torchrun")] == [
        "srun", "--nodes", "2", "--ntasks", "2", "--ntasks-per-node", "1", "--cpus-per-task", "8",
    ]
    torchrun = words[words.index("torchrun"):]
    assert torchrun[torchrun.index("--nnodes") + 1] == "2" and torchrun[torchrun.index("--nproc-per-node") + 1] == "4"
    assert torchrun[-2:] == ["-m", "membench.cli"]
    assert any(word.endswith(f":{ws.RENDEZVOUS_PORT}") for word in torchrun)


def test_training_resources():
    assert ws.division_train_resources(4, 2, on_gpu=False) == {"gpu": 0}
    assert ws.division_train_resources(4, 1, on_gpu=True) == {"gpu": 4}
    assert ws.division_train_resources(4, 2, on_gpu=True) == {
        "gres": "gpu:4", "nodes": 2, "tasks": 2, "tasks_per_gpu": 0, "mpi": "srun",
    }


def test_timing_jobs_claim_every_local_core_and_their_threads_on_a_cluster():
    assert ws.timing_job_threads(1, local_cores=8) == 8
    assert ws.timing_job_threads(16, local_cores=8) == 16
    assert ws.timing_job_threads(4, local_cores=None) == 4


@pytest.mark.parametrize(("visible", "count"), [("", 0), ("0", 1), ("0,1,2", 3), ("-1", 0), ("0,-1,1", 1), ("GPU-a,GPU-b", 2)])
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


@pytest.mark.parametrize(("main", "dryrun", "lint", "starts"), [
    (True, False, False, True), (True, True, False, False), (True, False, True, False), (False, False, False, False),
])
def test_only_the_process_of_a_run_starts_jobs(main, dryrun, lint, starts):
    workflow = SimpleNamespace(is_main_process=main, output_settings=SimpleNamespace(dryrun=dryrun),
                               check_envvars=not lint)
    assert ws.starts_jobs(workflow) is starts
