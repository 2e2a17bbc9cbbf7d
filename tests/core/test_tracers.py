"""The exact byte counters: saved activations and live tensor storages, against hand counts."""

import torch
from torch import nn

from membench.core.tracers import LiveTensorTracker, SavedActivationCounter

BATCH, IN, HIDDEN, OUT = 8, 16, 32, 4
F32 = 4


def _mlp():
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def test_saved_activations_match_hand_count():
    model = _mlp()
    x = torch.randn(BATCH, IN)
    with SavedActivationCounter(exclude=model.parameters()) as counter:
        loss = model(x).square().sum()
    # Linear 1 saves its input x; ReLU saves its output (which Linear 2 saves too: one storage);
    # square saves its input (Linear 2's output). Weights are parameters and excluded.
    expected = (BATCH * IN + BATCH * HIDDEN + BATCH * OUT) * F32
    assert counter.peak_bytes == expected
    loss.backward()
    del loss
    assert counter.current_bytes == BATCH * IN * F32  # only x, which the test still holds


def test_saved_activations_count_parameters_when_not_excluded():
    model = _mlp()
    x = torch.randn(BATCH, IN)
    with SavedActivationCounter() as counter:
        model(x).square().sum()
    # Linear 2 saves its weight to pass the gradient on to ReLU's output; Linear 1 need not, since
    # nothing before it requires a gradient.
    parameter_bytes = HIDDEN * OUT * F32
    assert counter.peak_bytes == (BATCH * IN + BATCH * HIDDEN + BATCH * OUT) * F32 + parameter_bytes


def test_saved_activations_count_custom_function_saves():
    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            half = x.to(torch.float16)
            ctx.save_for_backward(half)
            return x**3

        @staticmethod
        def backward(ctx, grad):
            (half,) = ctx.saved_tensors
            return grad * 3 * half.float() ** 2

    x = torch.randn(10, 10, requires_grad=True)
    with SavedActivationCounter(exclude=[x]) as counter:
        Cube.apply(x).sum()
    assert counter.peak_bytes == 10 * 10 * 2


def test_live_tensor_tracker_matches_hand_count():
    model = _mlp()
    x = torch.randn(BATCH, IN)
    with LiveTensorTracker() as tracker:
        y = model(x)
        after_forward = tracker.current_bytes
    # Alive after forward: ReLU output (saved) and the final output; Linear 1's output was freed
    # once ReLU had run (ReLU saves its result, not its input).
    assert after_forward == (BATCH * HIDDEN + BATCH * OUT) * F32
    # Peak: Linear 1's output and ReLU's output alive together.
    assert tracker.peak_bytes == 2 * BATCH * HIDDEN * F32
    del y


def test_live_tensor_tracker_ignores_views_and_existing_storages():
    base = torch.randn(100, 100)
    with LiveTensorTracker() as tracker:
        view = base.t()[:10]
        view.add_(1.0)
        copy = base.clone()
    assert tracker.peak_bytes == copy.numel() * F32
    del copy
    assert tracker.current_bytes == 0


def test_live_tensor_tracker_reset_peak():
    with LiveTensorTracker() as tracker:
        big = torch.zeros(1000)
        del big
        tracker.reset_peak()
        small = torch.zeros(10)
    assert tracker.peak_bytes == small.numel() * F32
