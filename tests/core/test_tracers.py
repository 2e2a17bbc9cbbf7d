"""The exact byte counters: saved activations, live tensor storages and the CPU allocator, against
hand counts."""

import pytest
import torch
from torch import nn

from membench.core.tracers import CpuAllocatorTracker, LiveTensorTracker, SavedActivationCounter

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
        after_forward = tracker.current_bytes("cpu")
    # Alive after forward: ReLU output (saved) and the final output; Linear 1's output was freed
    # once ReLU had run (ReLU saves its result, not its input).
    assert after_forward == (BATCH * HIDDEN + BATCH * OUT) * F32
    # Peak: Linear 1's output and ReLU's output alive together.
    assert tracker.peak_bytes("cpu") == 2 * BATCH * HIDDEN * F32
    assert tracker.peak_bytes("cuda") == 0
    del y


def test_live_tensor_tracker_ignores_views_and_existing_storages():
    base = torch.randn(100, 100)
    with LiveTensorTracker() as tracker:
        view = base.t()[:10]
        view.add_(1.0)
        copy = base.clone()
    assert tracker.peak_bytes("cpu") == copy.numel() * F32
    del copy
    assert tracker.current_bytes("cpu") == 0


def test_live_tensor_tracker_reset_peak():
    with LiveTensorTracker() as tracker:
        big = torch.zeros(1000)
        del big
        tracker.reset_peak()
        small = torch.zeros(10)
    assert tracker.peak_bytes("cpu") == small.numel() * F32


def test_live_tensor_tracker_keeps_devices_apart():
    with LiveTensorTracker() as tracker:
        host = torch.zeros(100)
        meta = torch.zeros(1000, device="meta")
    assert tracker.peak_bytes("cpu") == host.numel() * F32
    assert tracker.peak_bytes("meta") == meta.numel() * F32


def test_live_tensor_tracker_counts_an_added_storage_once():
    outside = torch.zeros(100)
    with LiveTensorTracker() as tracker:
        tracker.add(outside)
        tracker.add(outside[10:])
        inside = outside + 1
        tracker.add(inside)
    assert tracker.peak_bytes("cpu") == 2 * 100 * F32


def test_cpu_allocator_tracker_matches_hand_count():
    with CpuAllocatorTracker() as allocator:
        first = torch.empty(1000)
        second = torch.empty(500)
        del first
        third = torch.empty(200)
    assert allocator.peak_bytes == (1000 + 500) * F32
    del second, third


def test_cpu_allocator_tracker_sees_the_convolution_workspace_the_tensor_tracker_misses():
    batch, channels, filters, window, positions = 4, 8, 64, 32, 256
    # Two threads: the convolution then unfolds its input into a workspace (on one thread it takes a
    # path without one); the autouse fixture restores the thread count.
    torch.set_num_threads(2)
    torch.manual_seed(0)
    conv = nn.Conv1d(channels, filters, kernel_size=window, stride=window)
    x = torch.randn(batch, channels, window * positions)
    with CpuAllocatorTracker() as allocator, LiveTensorTracker() as tracker:
        y = conv(x)
        y.sum().backward()
    # Tensors: the output y, the weight and bias gradients, the loss and its gradient (scalars).
    output_bytes = batch * filters * positions * F32
    gradient_bytes = (filters * channels * window + filters) * F32
    assert tracker.peak_bytes("cpu") == output_bytes + gradient_bytes + 2 * F32
    # The kernels unfold the input into a (batch, channels * window, positions) matrix, a workspace no
    # operator returns: the allocator peak holds it beside the output and the weight gradient (the
    # bias gradient and the scalars may come after it is freed, depending on the thread count).
    unfolded_bytes = batch * channels * window * positions * F32
    weight_gradient_bytes = filters * channels * window * F32
    assert allocator.peak_bytes >= output_bytes + weight_gradient_bytes + unfolded_bytes
    assert allocator.peak_bytes - tracker.peak_bytes("cpu") >= unfolded_bytes - (filters + 2) * F32
    del y


def test_cpu_allocator_tracker_refuses_to_nest():
    with CpuAllocatorTracker():
        with pytest.raises(RuntimeError, match="already running"):
            CpuAllocatorTracker().__enter__()
