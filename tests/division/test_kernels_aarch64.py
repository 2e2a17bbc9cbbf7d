"""DIVISION's CPU kernels on AArch64 (NEON), run under qemu-user: `cross_isa/kernel_digests.cpp`
is built for x86-64 and for AArch64 from the same baseline source, and the digests of every output
(3 dtypes, 4 bit widths, 8 map shapes with and without NaN and infinities, 5 group sizes, masks)
must agree, NaN bits aside. One map's digests are also computed from the pure-torch reference, which
ties both builds to it. Skipped where the cross compiler (`g++-aarch64-linux-gnu`) or qemu-user is
not installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils import cpp_extension

from membench.division import compress
from membench.division.extension import CSRC_DIR

DRIVER = Path(__file__).with_name("cross_isa") / "kernel_digests.cpp"
AARCH64_SYSROOT = Path("/usr/aarch64-linux-gnu")  # Debian's cross toolchain: qemu's library root
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (
            shutil.which("g++")
            and shutil.which("aarch64-linux-gnu-g++")
            and shutil.which("qemu-aarch64")
            and (AARCH64_SYSROOT / "lib").is_dir()
        ),
        reason="needs g++, aarch64-linux-gnu-g++, qemu-aarch64 and /usr/aarch64-linux-gnu/lib",
    ),
]
SEED, OFFSET = 0x1234_5678_9ABC_DEF0, 0x0FED_CBA9_8765_4321
MASK64 = (1 << 64) - 1


def _build(compiler: str, out: Path) -> Path:
    includes = [f"-I{path}" for path in cpp_extension.include_paths()]
    # The extension's own flags for its CPU kernels (membench.division.extension.SPEC).
    flags = ["-std=c++17", "-O3", "-ffp-contract=off", "-fopenmp"]
    sources = [str(DRIVER), str(CSRC_DIR / "division_cpu_baseline.cpp")]
    command = [compiler, *flags, *includes, f"-I{CSRC_DIR}", *sources, "-o", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def _digests(command: list[str]) -> dict[tuple[str, str], str]:
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
    lines = [line.split() for line in result.stdout.splitlines()]
    return {(case, output): digest for case, output, digest in lines}


@pytest.fixture(scope="module")
def digests(tmp_path_factory):
    """Digests of the x86-64 build, run here, and of the AArch64 build, run under qemu."""
    build = tmp_path_factory.mktemp("cross_isa")
    x86 = _build("g++", build / "digests_x86")
    aarch64 = _build("aarch64-linux-gnu-g++", build / "digests_aarch64")
    return _digests([str(x86)]), _digests(["qemu-aarch64", "-L", str(AARCH64_SYSROOT), str(aarch64)])


def test_neon_kernels_give_the_x86_baseline_bits(digests):
    x86, aarch64 = digests
    assert len(x86) > 5000 and x86.keys() == aarch64.keys()
    differing = sorted(key for key in x86 if x86[key] != aarch64[key])
    assert not differing, f"{len(differing)} outputs differ, first {differing[:5]}"


def _fnv(tensor: torch.Tensor) -> str:
    if tensor.is_floating_point():
        tensor = torch.where(torch.isnan(tensor), torch.full_like(tensor, float("nan")), tensor)
    data = tensor.contiguous().view(torch.uint8).numpy().tobytes()
    digest = 0xCBF29CE484222325
    for byte in data:
        digest = ((digest ^ byte) * 0x100000001B3) & MASK64
    return f"{digest:016x}"


def _map_values(count: int, seed: int, special: bool) -> torch.Tensor:
    """The driver's map_values, in float32 as it computes them."""
    values = np.empty(count, dtype=np.float32)
    state = (seed * 0x9E3779B97F4A7C15 + 1) & MASK64
    for i in range(count):
        total = np.float32(0.0)
        for _ in range(4):
            state = (state * 6364136223846793005 + 1442695040888963407) & MASK64
            total = np.float32(total + np.float32(state >> 40) / np.float32(1 << 24))
        values[i] = -0.0 if i % 7 == 0 else (total - np.float32(2.0)) * np.float32(3.0) + np.float32(1.0)
    if special and count > 40:
        values[3], values[17], values[count - 5] = np.nan, np.inf, -np.inf
    return torch.from_numpy(values)


def test_the_digests_are_the_reference_s(digests):
    """The driver's first map in float16, with NaN and infinities (seed 1, its gradient's 1002)."""
    x86, _ = digests
    shape, dtype, base = (2, 3, 17, 13), torch.float16, "float16/2x3x17x13/special"
    x = _map_values(2 * 3 * 17 * 13, 1, True).to(dtype).view(shape)
    grad = _map_values(x.numel(), 1002, False).to(dtype).view(shape)
    expected = {}
    for bits in (1, 2, 4, 8):
        name = f"{base}/bits{bits}"
        lfc, packed, minimum, scale = compress.division_compress(x, 8, bits, SEED, OFFSET)
        restored = compress.division_decompress(lfc, packed, minimum, scale, 8, bits, 17, 13, dtype)
        outputs = {"lfc": lfc, "packed": packed, "minimum": minimum, "scale": scale, "restored": restored}
        for output, tensor in outputs.items():
            expected[(name, f"division_{output}")] = _fnv(tensor)
        for group_size in (600, 256, 100, 33, 8):
            group = f"{name}/group{group_size}"
            packed, minimum, scale = compress.group_compress(x, group_size, bits, SEED, OFFSET)
            restored = compress.group_decompress(packed, minimum, scale, group_size, bits, list(shape), dtype)
            outputs = {"packed": packed, "minimum": minimum, "scale": scale, "restored": restored}
            for output, tensor in outputs.items():
                expected[(group, f"group_{output}")] = _fnv(tensor)
    out, mask = compress.relu_pack(x)
    expected[(base, "relu_out")], expected[(base, "relu_mask")] = _fnv(out), _fnv(mask)
    expected[(base, "relu_grad")] = _fnv(compress.masked_grad(grad, mask, 1.0))
    for p, label in ((0.7, "0.700000"), (0.1, "0.100000")):
        name = f"{base}/dropout{label}"
        out, mask = compress.dropout_pack(x, p, SEED, OFFSET)
        gain = float(np.float32(1.0 / (1.0 - np.float32(p))))
        expected[(name, "dropout_out")], expected[(name, "dropout_mask")] = _fnv(out), _fnv(mask)
        expected[(name, "dropout_grad")] = _fnv(compress.masked_grad(grad, mask, gain))
    differing = sorted(key for key, digest in expected.items() if x86[key] != digest)
    assert not differing, f"{len(differing)} of {len(expected)} differ from the reference: {differing[:5]}"
