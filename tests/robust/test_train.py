"""The training loop: every batch once per epoch, reproducible under a seed, the guard reacts."""

import pytest
import torch

from membench.core.checkpoint import run_identity
from membench.robust import train as train_module
from membench.robust.models import build_model
from membench.robust.train import SequentialSource, TrainSettings, epoch_batches, train

SETTINGS = TrainSettings(
    attack="pgd",
    eps=0.1,
    steps=2,
    alpha=0.05,
    epochs=2,
    batch_size=32,
    learning_rate=0.01,
    guard_steps=2,
    guard_samples=64,
)


def _run(digits, tmp_path, settings=SETTINGS, name="ckpt.pt"):
    x, y = digits.x_train[:200], digits.y_train[:200]
    model = build_model("mlp", digits.input_shape, 10, 32, seed=settings.seed)
    result = train(
        model,
        x,
        y,
        settings,
        SequentialSource(x, y, settings, torch.device("cpu")),
        tmp_path / name,
        torch.device("cpu"),
        run_identity(settings.__dict__),
    )
    return model, result


def test_epoch_batches_cover_every_sample_once():
    for epoch in range(3):
        batches = epoch_batches(103, 10, seed=4, epoch=epoch)
        assert sorted(torch.cat(batches).tolist()) == list(range(103))
        assert [len(b) for b in batches] == [10] * 10 + [3]
    assert not torch.equal(torch.cat(epoch_batches(103, 10, 4, 0)), torch.cat(epoch_batches(103, 10, 4, 1)))


def test_sequential_training_repeats_under_a_fixed_seed(digits, tmp_path):
    first, first_result = _run(digits, tmp_path, name="a.pt")
    second, second_result = _run(digits, tmp_path, name="b.pt")
    for a, b in zip(first.state_dict().values(), second.state_dict().values()):
        assert torch.equal(a, b)
    assert [row["train_loss"] for row in first_result.history] == [
        row["train_loss"] for row in second_result.history
    ]
    assert first_result.staleness == [0] * (2 * 7)


class _DuplicatingSource(SequentialSource):
    def epoch(self, epoch, batches, model):
        items = list(super().epoch(epoch, batches, model))
        yield from items + items[:1]


def test_a_batch_arriving_twice_is_an_error(digits, tmp_path):
    x, y = digits.x_train[:64], digits.y_train[:64]
    model = build_model("mlp", digits.input_shape, 10, 16, seed=0)
    with pytest.raises(RuntimeError, match="batch 0 arrived twice"):
        train(
            model,
            x,
            y,
            SETTINGS,
            _DuplicatingSource(x, y, SETTINGS, torch.device("cpu")),
            tmp_path / "c.pt",
            torch.device("cpu"),
            run_identity({}),
        )


@pytest.mark.parametrize("action", ["shrink", "stop"])
def test_guard_restores_weights_and_shrinks_alpha_or_stops(digits, tmp_path, monkeypatch, action):
    """A guard accuracy that falls off a cliff after epoch 1 restores epoch 1's weights and reacts."""
    guard_accuracies = iter([0.8, 0.05, 0.8])
    monkeypatch.setattr(train_module, "evaluate", lambda *args, **kwargs: (1.0, next(guard_accuracies)))
    snapshots = []
    original_save = train_module.save_checkpoint
    monkeypatch.setattr(
        train_module,
        "save_checkpoint",
        lambda path, state, identity, **options: (
            snapshots.append({k: v.clone() for k, v in state["model"].items()}),
            original_save(path, state, identity, **options),
        ),
    )
    settings = TrainSettings(**{**SETTINGS.__dict__, "epochs": 3, "guard_action": action})
    model, result = _run(digits, tmp_path, settings)
    assert result.guard_events == 1
    assert [row["guard_event"] for row in result.history][:2] == ["", action]
    # after the event, the saved weights are epoch 1's again
    for a, b in zip(snapshots[0].values(), snapshots[1].values()):
        assert torch.equal(a, b)
    if action == "shrink":
        assert result.alpha == pytest.approx(SETTINGS.alpha * 0.5) and result.epochs_done == 3
    else:
        assert result.guard_stopped and result.epochs_done == 2


def test_a_checkpoint_of_other_settings_is_not_resumed_and_training_starts_over(digits, tmp_path, caplog):
    _run(digits, tmp_path, name="d.pt")
    other = TrainSettings(**{**SETTINGS.__dict__, "eps": 0.2, "epochs": 3})
    _, result = _run(digits, tmp_path, other, name="d.pt")
    assert result.resumed_from_epoch == 0 and result.epochs_done == 3
    assert "not resumed, the run starts over: options changed: epochs, eps" in caplog.text
    _, again = _run(digits, tmp_path, other, name="d.pt")  # a finished run's checkpoint is not resumed
    assert again.resumed_from_epoch == 0 and again.epochs_done == 3
    assert again.history[-1]["train_loss"] == result.history[-1]["train_loss"]
