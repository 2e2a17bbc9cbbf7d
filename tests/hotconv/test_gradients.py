"""HotConv's hand-written gradients and MalConv2's pooling against dense MalConv autograd."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from membench.hotconv.models import MalConvNet, ModelSpec

RELATIVE_TOLERANCE = 1e-6


def _models(window: int, stride: int, filters: int = 6, classes: int = 3):
    reference = MalConvNet(
        ModelSpec("malconv", classes, filters, window, stride, 4 * window, 2 * window)
    ).double()
    with torch.no_grad():
        # Filter 0's conv1 is negative everywhere: its ReLU gradient must be masked (the original's defect).
        reference.conv1.bias[0] = -1e3
    models = {}
    for variant in ("malconv", "malconv2", "hotconv", "hotconv_eco"):
        model = MalConvNet(
            ModelSpec(variant, classes, filters, window, stride, 4 * window, 2 * window)
        ).double()
        model.load_state_dict(reference.state_dict())
        models[variant] = model
    return models


def _tokens(generator: torch.Generator, batch: int, length: int) -> torch.Tensor:
    tokens = torch.randint(1, 257, (batch, length), dtype=torch.int16, generator=generator)
    tokens[1, length // 3 :] = 0  # a shorter file padded in the batch
    return tokens


def _gradients(model, tokens, labels, freeze_embedding: bool) -> dict[str, torch.Tensor]:
    model.embed.weight.requires_grad_(not freeze_embedding)
    loss = F.cross_entropy(model(tokens), labels)
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}


def _relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-300))


@pytest.mark.parametrize("length", [64, 208, 1024])
@pytest.mark.parametrize("variant", ["hotconv", "hotconv_eco"])
def test_hot_gradients_equal_dense_autograd_with_frozen_embedding(variant, length):
    torch.manual_seed(length)
    generator = torch.Generator().manual_seed(length)
    models = _models(window=16, stride=16)
    tokens = _tokens(generator, 4, length)
    labels = torch.tensor([0, 1, 2, 1])
    expected = _gradients(models["malconv"], tokens, labels, freeze_embedding=True)
    actual = _gradients(models[variant], tokens, labels, freeze_embedding=True)
    assert set(actual) == {
        "conv1.weight",
        "conv1.bias",
        "conv2.weight",
        "conv2.bias",
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
        "fc2.bias",
    }
    for name in expected:
        assert expected[name].abs().max() > 0, name  # the comparison is not vacuous
        assert _relative_error(actual[name], expected[name]) < RELATIVE_TOLERANCE, name


@pytest.mark.parametrize("variant", ["malconv2", "hotconv", "hotconv_eco"])
def test_gradients_equal_with_trained_embedding_and_overlapping_windows(variant):
    torch.manual_seed(1)
    generator = torch.Generator().manual_seed(1)
    models = _models(window=16, stride=4)
    tokens = _tokens(generator, 3, 160)
    labels = torch.tensor([2, 0, 1])
    expected = _gradients(models["malconv"], tokens, labels, freeze_embedding=False)
    actual = _gradients(models[variant], tokens, labels, freeze_embedding=False)
    assert "embed.weight" in actual and float(actual["embed.weight"][0].abs().max()) == 0.0  # padding row
    for name in expected:
        assert _relative_error(actual[name], expected[name]) < RELATIVE_TOLERANCE, name


@pytest.mark.parametrize("window,stride,length", [(16, 16, 64), (16, 16, 512), (16, 8, 200), (8, 2, 96)])
def test_malconv2_pools_like_malconv(window, stride, length):
    torch.manual_seed(2)
    generator = torch.Generator().manual_seed(2)
    models = _models(window, stride)
    tokens = _tokens(generator, 4, length)
    with torch.no_grad():
        expected = models["malconv"].pool(tokens)
        for variant in ("malconv2", "hotconv", "hotconv_eco"):
            torch.testing.assert_close(models[variant].pool(tokens), expected, rtol=1e-12, atol=1e-12)


def test_hot_pool_keeps_little_for_backward():
    # The saved state of HotConv is a few (B, F) tensors whatever the input length.
    from membench.core.tracers import SavedActivationCounter

    saved = {}
    for length in (1024, 8192):
        model = MalConvNet(ModelSpec("hotconv", 2, 8, 16, 16, 256, 16))
        tokens = torch.randint(1, 257, (2, length), dtype=torch.int16)
        with SavedActivationCounter(exclude=[*model.parameters(), tokens]) as counter:
            model(tokens)
        saved[length] = counter.peak_bytes
    assert saved[1024] == saved[8192] > 0


def test_short_input_is_rejected():
    model = MalConvNet(ModelSpec("hotconv", 2, 4, 16, 16, 64, 16))
    with pytest.raises(ValueError, match="length >= 16"):
        model(torch.ones((2, 8), dtype=torch.int16))


def _tied_models() -> dict[str, MalConvNet]:
    """Two filters over windows A = tokens (1, 2) and B = (3, 4): filter 0 prefers B, filter 1 sees
    A and B tie exactly. Embedding channel 0 (p) and 1 (q): p sums to 3 in both windows, q to 1 in
    A and 2 in B; conv1 filter 0 reads q, filter 1 reads p; conv2 is zero (gate 1/2)."""
    models = {}
    for variant in ("malconv", "malconv2"):
        torch.manual_seed(0)
        model = MalConvNet(
            ModelSpec(variant, 2, num_filters=2, window_size=2, stride=2, fp_slice_size=2, fp2_slice_size=2)
        ).double()
        with torch.no_grad():
            model.embed.weight.zero_()
            model.embed.weight[1:5, 0] = torch.tensor([1.0, 2.0, 0.0, 3.0], dtype=torch.float64)
            model.embed.weight[1:5, 1] = torch.tensor([0.5, 0.5, 1.0, 1.0], dtype=torch.float64)
            for conv in (model.conv1, model.conv2):
                conv.weight.zero_()
                conv.bias.zero_()
            model.conv1.weight[0, 1] = 1.0
            model.conv1.weight[1, 0] = 1.0
        models[variant] = model
    return models


def test_malconv2_resolves_exact_ties_like_dense_malconv():
    models = _tied_models()
    tokens = torch.tensor([[1, 2, 3, 4]], dtype=torch.int16)
    labels = torch.tensor([1])
    expected = _gradients(models["malconv"], tokens, labels, freeze_embedding=False)
    actual = _gradients(models["malconv2"], tokens, labels, freeze_embedding=False)
    assert (
        expected["embed.weight"][1:3, 0].abs().min() > 0
    )  # filter 1's tie went to window A in the dense model
    for name in expected:
        assert torch.equal(actual[name], expected[name]), name
