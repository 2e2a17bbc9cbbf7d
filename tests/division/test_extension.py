"""The built C++ kernels against the pure-torch reference (built once per session, see conftest)."""

from __future__ import annotations

import json

import pytest
import torch

from membench.core.errors import InputError
from membench.division import compress
from membench.division.compress import DivisionCompressor, GroupCompressor
from membench.division.kernels import TORCH_KERNELS, select_kernels


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_manifest_records_the_build(built_manifest):
    manifest = json.loads(built_manifest.read_text())
    assert manifest["cuda"] is False and manifest["torch_version"] == torch.__version__
    assert (built_manifest.parent / manifest["library"]).is_file()
    assert "division_ops.cpp" in manifest["sources"] and "quantize_pack" in manifest["kernels"]


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_quantize_pack_is_bit_exact_given_the_same_noise(extension_kernels, bits):
    x = torch.randn(37, 123, generator=_generator()) * 3
    minimum, scale = compress.row_range(x, bits)
    minimum, scale = minimum.float(), scale.float()
    noise = torch.rand(x.shape, generator=_generator(1))
    expected = compress.quantize_pack(x, minimum, scale, noise, bits)
    packed = extension_kernels.quantize_pack(x, minimum, scale, noise, bits)
    assert torch.equal(packed, expected)
    assert torch.equal(
        extension_kernels.unpack_dequantize(packed, minimum, scale, bits, 123),
        compress.unpack_dequantize(expected, minimum, scale, bits, 123),
    )


def test_masks_are_bit_exact(extension_kernels):
    mask = torch.rand(1001, generator=_generator()) > 0.3
    packed = extension_kernels.pack_mask(mask)
    assert torch.equal(packed, compress.pack_mask(mask))
    assert torch.equal(extension_kernels.unpack_mask(packed, 1001), mask)


@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1)])
def test_maxpool_kernels_match_reference(extension_kernels, kernel, stride, padding):
    x = torch.randn(2, 4, 11, 11, generator=_generator())
    out, index = extension_kernels.maxpool2d_forward(x, kernel, stride, padding)
    ref_out, ref_index = compress.maxpool2d_forward(x, kernel, stride, padding)
    assert torch.equal(out, ref_out) and torch.equal(index, ref_index)
    grad_out = torch.randn(out.shape, generator=_generator(1))
    grad = extension_kernels.maxpool2d_backward(grad_out, index, 11, 11, kernel, stride, padding)
    expected = compress.maxpool2d_backward(grad_out, ref_index, 11, 11, kernel, stride, padding)
    if kernel == stride:
        assert torch.equal(grad, expected)
    else:  # overlapping windows: sums may be added in another order
        torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize("compressor", [DivisionCompressor(8, 2), GroupCompressor(256, 2)])
def test_compressors_agree_bit_for_bit_with_the_same_generator(extension_kernels, compressor):
    x = torch.randn(3, 5, 20, 20, generator=_generator())
    ours = compressor.compress(x, _generator(5), extension_kernels)
    reference = compressor.compress(x, _generator(5), TORCH_KERNELS)
    assert all(torch.equal(a, b) for a, b in zip(ours, reference))


def test_stochastic_rounding_statistics_match(extension_kernels):
    """Independent noise: both paths give the same level frequencies and an unbiased mean."""
    x = torch.full((1, 20000), 0.3)  # between levels 0 and 1 of the grid below
    minimum, scale = torch.zeros(1), torch.ones(1)
    means = []
    for kernels, seed in ((extension_kernels, 1), (TORCH_KERNELS, 2)):
        noise = torch.rand(x.shape, generator=_generator(seed))
        levels = kernels.unpack_dequantize(
            kernels.quantize_pack(x, minimum, scale, noise, 2), minimum, scale, 2, 20000
        )
        assert set(levels.unique().tolist()) == {0.0, 1.0}
        means.append(levels.mean().item())
    assert abs(means[0] - 0.3) < 0.015 and abs(means[1] - 0.3) < 0.015
    assert abs(means[0] - means[1]) < 0.02


def test_bad_arguments_raise_from_the_extension(extension_kernels):
    with pytest.raises(RuntimeError, match="bits"):
        extension_kernels.quantize_pack(
            torch.zeros(1, 4), torch.zeros(1), torch.ones(1), torch.zeros(1, 4), 3
        )
    with pytest.raises(RuntimeError, match="noise"):
        extension_kernels.quantize_pack(
            torch.zeros(1, 4), torch.zeros(1), torch.ones(1), torch.zeros(1, 5), 2
        )


def test_kernel_selection(built_manifest, tmp_path):
    assert select_kernels("torch", built_manifest).name == "torch"
    assert select_kernels("auto", built_manifest).name == "extension"
    assert select_kernels("auto", None).name == "torch"
    missing = tmp_path / "nothing.json"
    assert select_kernels("auto", missing).name == "torch"  # falls back, logs why
    with pytest.raises(InputError, match="manifest not found"):
        select_kernels("extension", missing)
    stale = tmp_path / "manifest.json"
    stale.write_text(json.dumps({"extension": "x", "library": "x.so", "torch_version": "0.0"}))
    with pytest.raises(InputError, match="rebuild"):
        select_kernels("extension", stale)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):
        select_kernels("extension", broken)
    with pytest.raises(InputError, match="kernels must be"):
        select_kernels("fast", built_manifest)
