"""The methods as model conversions: gradients, saved bytes, shared parameters."""

from __future__ import annotations

import copy
import weakref

import pytest
import torch
from torch import nn

from membench.core.tracers import SavedActivationCounter
from membench.division.functions import (
    CompressedBatchNorm2d,
    CompressedConv2d,
    IndexMaxPool2d,
    MaskedDropout,
    MaskedReLU,
)
from membench.division.methods import convert_model
from membench.division.models import build_model
from membench.division.options import METHODS, MODELS, MethodSpec


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def smooth_batch(n: int = 16, size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Images made of low-frequency sinusoids (what natural images mostly are)."""
    generator = torch.Generator().manual_seed(0)
    grid = torch.linspace(0, 1, size)
    freq = torch.rand(n, 3, 2, generator=generator) * 3
    phase = torch.rand(n, 3, 1, 1, generator=generator) * 6.28
    x = torch.sin(
        6.28 * (freq[..., 0, None, None] * grid[:, None] + freq[..., 1, None, None] * grid[None, :]) + phase
    )
    return x, torch.randint(0, 10, (n,), generator=generator)


def gradients(model: nn.Module, x, y) -> torch.Tensor:
    model.train()
    nn.functional.cross_entropy(model(x), y).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


@pytest.mark.parametrize("method", ["division", "actnn2bit"])
def test_compressed_gradients_close_to_vanilla_on_smooth_input(method):
    base = small_cnn()
    x, y = smooth_batch()
    reference = gradients(copy.deepcopy(base), x, y)
    model = copy.deepcopy(base)
    convert_model(model, method, seed=1)
    cosine = nn.functional.cosine_similarity(reference, gradients(model, x, y), dim=0)
    assert cosine > 0.9


def test_division_with_eight_bits_is_nearly_exact():
    base = small_cnn()
    x, y = smooth_batch()
    model = copy.deepcopy(base)
    convert_model(model, "division", MethodSpec(hfc_bits=8))
    cosine = nn.functional.cosine_similarity(
        gradients(copy.deepcopy(base), x, y), gradients(model, x, y), dim=0
    )
    assert cosine > 0.9999


def test_checkpoint_gradients_equal_vanilla():
    torch.manual_seed(0)
    base = build_model("resnet18", 10, width=4)
    x, y = smooth_batch(4)
    reference = gradients(copy.deepcopy(base), x, y)
    model = copy.deepcopy(base)
    convert_model(model, "checkpoint")
    torch.testing.assert_close(gradients(model, x, y), reference, rtol=1e-4, atol=1e-6)


def test_checkpoint_updates_running_statistics_once_as_vanilla():
    """The recomputation in backward must not update batch-norm statistics a second time (that
    made checkpointing's validation accuracy differ from vanilla's with identical training loss)."""
    torch.manual_seed(0)
    base = build_model("resnet18", 10, width=4)
    x, y = smooth_batch(4)
    vanilla, model = copy.deepcopy(base), copy.deepcopy(base)
    convert_model(model, "checkpoint")
    gradients(vanilla, x, y), gradients(model, x, y)
    for (name, expected), actual in zip(vanilla.named_buffers(), model.buffers()):
        assert torch.equal(actual, expected), name
    assert all(int(b) == 1 for n, b in model.named_buffers() if n.endswith("num_batches_tracked"))
    vanilla.eval(), model.eval()
    with torch.no_grad():
        assert torch.equal(model(x), vanilla(x))


def test_conversion_replaces_layers_and_shares_parameters():
    model = small_cnn()
    params = {n: p for n, p in model.named_parameters()}
    buffers = {n: b for n, b in model.named_buffers()}
    convert_model(model, "division")
    kinds = [type(m) for m in model]
    assert kinds[:6] == [
        CompressedConv2d,
        CompressedBatchNorm2d,
        MaskedReLU,
        IndexMaxPool2d,
        CompressedConv2d,
        CompressedBatchNorm2d,
    ]
    assert all(p is params[n] for n, p in model.named_parameters())
    assert all(b is buffers[n] for n, b in model.named_buffers())


def test_batch_norm_running_statistics_match_vanilla():
    base = small_cnn()
    x, y = smooth_batch()
    vanilla, converted = copy.deepcopy(base), copy.deepcopy(base)
    convert_model(converted, "division")
    gradients(vanilla, x, y), gradients(converted, x, y)
    for (name, a), b in zip(vanilla.named_buffers(), converted.buffers()):
        torch.testing.assert_close(a, b, msg=name)


def test_eval_mode_saves_nothing_and_equals_vanilla():
    base = small_cnn().eval()
    model = copy.deepcopy(base)
    convert_model(model, "division")
    model.eval()
    x, _ = smooth_batch(4)
    torch.testing.assert_close(model(x), base(x))


def test_dropout_keeps_a_one_bit_mask_and_scales():
    model = nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.25))
    convert_model(model, "division", seed=3)
    assert isinstance(model[1], MaskedDropout)
    x = torch.randn(32, 64, requires_grad=True)
    counter = SavedActivationCounter(exclude=model.parameters())
    with counter:
        out = model[1](x)
    assert counter.peak_bytes == 32 * 64 // 8
    out.sum().backward()
    kept = out != 0
    torch.testing.assert_close(x.grad, kept.float() / 0.75)
    torch.testing.assert_close(out[kept], x[kept] / 0.75)
    assert 0.6 < kept.float().mean() < 0.9


def _saved_bytes(model: nn.Module, x) -> int:
    counter = SavedActivationCounter(exclude=list(model.parameters()) + list(model.buffers()))
    model.train()
    with counter:
        loss = model(x).sum()
    loss.backward()
    return counter.peak_bytes


def test_activation_memory_ratios_on_a_small_resnet():
    torch.manual_seed(0)
    base = build_model("resnet18", 10, width=8)
    x = torch.randn(4, 3, 32, 32)
    saved = {}
    for method in METHODS:
        model = copy.deepcopy(base)
        convert_model(model, method)
        saved[method] = _saved_bytes(model, x)
    assert saved["vanilla"] / saved["division"] > 10
    assert saved["vanilla"] / saved["actnn2bit"] > 10
    assert 2 < saved["vanilla"] / saved["checkpoint"] < 6


@pytest.mark.parametrize("name", MODELS)
def test_every_model_runs_and_division_saves_bytes(name):
    torch.manual_seed(0)
    stem = "cifar" if name in ("densenet121", "resnet50") else None
    model = build_model(name, 7, width=4 if name != "resnet164" else 2, stem=stem)
    x = torch.randn(2, 3, 16, 16)
    assert model(x).shape == (2, 7)
    vanilla_bytes = _saved_bytes(copy.deepcopy(model), x)
    converted = copy.deepcopy(model)
    convert_model(converted, "division")
    assert _saved_bytes(converted, x) < vanilla_bytes / 4


def test_imagenet_stem_models_take_larger_inputs():
    for name in ("resnet50", "densenet121"):
        model = build_model(name, 5, width=4)
        convert_model(model, "division")
        assert model(torch.randn(2, 3, 64, 64)).shape == (2, 5)


def test_unknown_method_and_model_are_refused():
    with pytest.raises(ValueError, match="method"):
        convert_model(small_cnn(), "zip")
    with pytest.raises(ValueError, match="model"):
        build_model("vgg", 10)


class _Recording:
    """A compressor that records what it compresses (storage addresses) and weak references to the
    compressed copies it returns."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.inputs: list[int] = []
        self.copies: list[weakref.ref] = []

    def compress(self, x, generator, ops):
        self.inputs.append(x.data_ptr())
        saved = self.inner.compress(x, generator, ops)
        self.copies += [weakref.ref(t) for t in saved]
        return saved

    def decompress(self, *args):
        return self.inner.decompress(*args)


def _recorded(model: nn.Module, method: str = "division") -> _Recording:
    context = convert_model(model, method)
    context.compressor = _Recording(context.compressor)
    return context.compressor


def test_every_step_compresses_its_own_inputs():
    """A fixed batch reused across steps (as the speed and memory benchmarks do) is compressed again
    in each step, and no compressed copy outlives its step's backward."""
    model = small_cnn()
    recording = _recorded(model)
    x, y = smooth_batch(4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    per_step = []
    for _ in range(3):
        recording.inputs.clear()
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        per_step.append(list(recording.inputs))
        assert recording.copies and all(ref() is None for ref in recording.copies)
    assert all(step[0] == x.data_ptr() for step in per_step)  # the first conv's input: the batch
    assert len({len(step) for step in per_step}) == 1


def test_a_tensor_feeding_two_layers_is_compressed_once_per_pass():
    class Fork(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, 4, 3, padding=1)
            self.left = nn.Conv2d(4, 4, 3, padding=1)
            self.right = nn.Conv2d(4, 4, 1)

        def forward(self, x):
            h = self.stem(x)
            return self.left(h) + self.right(h)

    torch.manual_seed(0)
    model = Fork()
    recording = _recorded(model)
    x = torch.randn(2, 3, 8, 8)
    for step in range(2):
        recording.inputs.clear()
        model(x).sum().backward()
        assert len(recording.inputs) == 2, step  # x, then h once for both convs


def test_the_generator_state_gives_back_the_same_noise():
    base = small_cnn()
    x, y = smooth_batch(4)
    first, second = copy.deepcopy(base), copy.deepcopy(base)
    context = convert_model(first, "division", seed=5)
    state = context.state_dict()
    gradients(first, x, y)
    other = convert_model(second, "division", seed=9)
    other.load_state_dict(state)
    expected = torch.cat([p.grad.flatten() for p in first.parameters()])
    assert torch.equal(gradients(second, x, y), expected)
    third = copy.deepcopy(base)
    convert_model(third, "division", seed=9)  # its own noise
    assert not torch.equal(gradients(third, x, y), expected)


def test_a_large_strided_input_gradient_is_computed_in_halves_bit_for_bit(monkeypatch):
    """On a CPU, a strided convolution's input gradient at or above the split size is computed half
    a batch at a time: the same bits as one call, with less held at once (oneDNN keeps two
    gradient-sized buffers beside its result)."""
    from membench.core.tracers import CpuAllocatorTracker
    from membench.division import functions

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(16, 8, 32, 32, generator=generator)
    weight = torch.randn(12, 8, 3, 3, generator=generator)
    grad_out = torch.randn(16, 12, 16, 16, generator=generator)
    args = (None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1)
    one_call = torch.ops.aten.convolution_backward(grad_out, x, weight, *args, [True, False, False])[0]
    peaks = {}
    for split_bytes in (x.numel() * 4 + 1, x.numel() * 4):  # just above the map: one call; at it: halves
        monkeypatch.setattr(functions, "_SPLIT_INPUT_GRAD_BYTES", split_bytes)
        functions._cpu_input_grad(grad_out, x, weight, args)  # oneDNN's first call sets up its caches
        with CpuAllocatorTracker() as tracker:
            grad_x = functions._cpu_input_grad(grad_out, x, weight, args)
        assert torch.equal(grad_x, one_call)
        peaks[split_bytes] = tracker.peak_bytes
    map_bytes = x.numel() * 4
    assert peaks[map_bytes] <= peaks[map_bytes + 1] - map_bytes // 4
    # A stride-1 convolution keeps one call whatever its size.
    monkeypatch.setattr(functions, "_SPLIT_INPUT_GRAD_BYTES", 0)
    same = (None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    grad_same = torch.randn(16, 12, 32, 32, generator=generator)
    expected = torch.ops.aten.convolution_backward(grad_same, x, weight, *same, [True, False, False])[0]
    assert torch.equal(functions._cpu_input_grad(grad_same, x, weight, same), expected)
