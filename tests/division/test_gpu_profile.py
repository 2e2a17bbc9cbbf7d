"""`.ci/gpu_profile.py`, which `.ci/gpu-acceptance` runs on a GPU to say where a step's device time
goes: its kinds of kernel, and a run of it on the CPU, where it sums operators instead."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "gpu_profile.py"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / ".ci" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_profile = _load("gpu_profile")
gpu_report = _load("gpu_report")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("void (anonymous namespace)::division_compress_kernel<c10::Half, 2, true>(...)", "compression"),
        ("void (anonymous namespace)::group_decompress_kernel<c10::Half, 2>(...)", "decompression"),
        ("void (anonymous namespace)::relu_pack_kernel<c10::Half, true>(...)", "compression"),
        ("void (anonymous namespace)::masked_grad_kernel<c10::Half, true>(...)", "decompression"),
        ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nchw_tilesize128x128x64", "convolution"),
        ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<__half, float, int, 512, true, 1, true>(...)", "batch_norm"),
        ("aten::convolution_backward", "convolution"),
        ("aten::native_batch_norm", "batch_norm"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(...)", "other"),
    ],
)
def test_kernels_are_sorted_into_kinds_by_name(name, kind):
    assert gpu_profile.kind_of(name) == kind


@pytest.mark.slow
def test_a_profile_on_the_cpu_accounts_for_the_whole_step_and_is_reported(tmp_path, built_manifest):
    out = tmp_path / "division" / "profile" / "division.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "workflow"), *sys.path])}
    command = [
        sys.executable, str(SCRIPT), "--method", "division", "--manifest", str(built_manifest),
        "--model", "resnet18", "--width", "8", "--image-size", "16", "--num-classes", "10",
        "--batch-size", "4", "--amp", "none", "--device", "cpu", "--steps", "2", "--warmup-steps", "1",
        "--out", str(out),
    ]  # fmt: skip
    subprocess.run(command, check=True, env=env, timeout=300, capture_output=True)
    record = json.loads(out.read_text())
    assert record["method"] == "division" and record["kernels"].startswith("cpp-") and record["steps"] == 2
    kinds = record["kinds_ms_per_step"]
    assert set(kinds) == {"compression", "decompression", "convolution", "batch_norm", "other"}
    assert kinds["convolution"] > 0 and kinds["batch_norm"] > 0
    assert sum(kinds.values()) == pytest.approx(record["device_ms_per_step"])
    assert 0 < len(record["top"]) <= gpu_profile.TOP_KERNELS
    lines = gpu_report._division_profile(tmp_path)
    header = "| method | device ms / step | compression | decompression | batch_norm | convolution | other |"
    assert header in lines
    assert any(line.startswith("| division | ") for line in lines)
    assert "`aten::convolution_backward`" in "\n".join(lines)


def test_a_compressed_method_needs_the_kernels_manifest(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--method", "division", "--out", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "workflow"), *sys.path])},
        timeout=120,
    )
    assert result.returncode == 2 and "--manifest is needed for division" in result.stderr
    assert not (tmp_path / "x.json").exists()
