"""``membench robust``: a killed trainer leaves no producer behind (tests/reliability has the
resume after SIGKILL); bad options and files give a one-line error; the table and figures are
drawn from run metrics."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from membench.cli import main
from membench.core.metrics import MEASURED_FIELDS
from membench.robust.plan import plan_runs
from membench.robust.scaling import scaling_table

QUICK = [
    "--train-limit",
    "256",
    "--test-limit",
    "64",
    "--hidden-units",
    "32",
    "--attack-steps",
    "2",
    "--batch-size",
    "32",
    "--eval-attack-steps",
    "3",
    "--eval-restarts",
    "1",
    "--guard-attack-steps",
    "2",
    "--guard-samples",
    "32",
    "--sample-interval-s",
    "0",
    "--device",
    "cpu",
]


def _membench(*args, **kwargs):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [sys.executable, "-m", "membench.cli", "robust", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _wait_for(path, process, timeout_s=120.0):
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-2000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigkill_of_the_trainer_leaves_no_producer(tmp_path):
    run = _membench(
        "train",
        "--mode",
        "parallel",
        "--producers",
        "2",
        "--epochs",
        "50",
        *QUICK,
        "--outdir",
        str(tmp_path / "par"),
    )
    _wait_for(tmp_path / "par" / "checkpoint.pt", run)
    run.send_signal(signal.SIGKILL)
    _, stderr = run.communicate(timeout=30)
    pids = [int(pid) for pid in re.findall(r"producer \d pid (\d+)", stderr)]
    assert len(pids) == 2
    deadline = time.monotonic() + 15
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [
            pid
            for pid in pids
            if os.path.exists(f"/proc/{pid}")
            and open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] not in ("Z", "X")
        ]
        time.sleep(0.1)
    assert not alive, f"orphaned producers {alive}"


@pytest.mark.slow
def test_sigterm_stops_a_parallel_run_cleanly(tmp_path):
    run = _membench(
        "train",
        "--mode",
        "parallel",
        "--producers",
        "1",
        "--epochs",
        "50",
        *QUICK,
        "--outdir",
        str(tmp_path / "par"),
    )
    _wait_for(tmp_path / "par" / "checkpoint.pt", run)
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 130
    assert "interrupted; producers stopped" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--eps", "1.5", "argument --eps: expected a number above 0 and at most 1, got '1.5'"),
        ("--publish-every", "8", "option --max-staleness: must be at least publish_every - 1 = 7"),
        ("--producers", "0", "argument --producers: expected an integer from 1 to 1024, got '0'"),
        ("--eval-alpha", "0", "argument --eval-alpha: expected a number above 0 and at most 1, got '0'"),
    ],
)
def test_bad_options_give_one_line_errors(tmp_path, capsys, option, value, message):
    extra = ["--max-staleness", "4"] if option == "--publish-every" else []
    try:
        code = main(["robust", "train", "--outdir", str(tmp_path), option, value, *extra])
    except SystemExit as exit_:  # a value out of its range: argparse's usage error
        code = exit_.code
    assert code == 2
    assert message in capsys.readouterr().err.splitlines()[-1]


def test_the_evaluation_attack_takes_its_step_size_and_records_it(tmp_path, monkeypatch):
    from membench.robust import job

    steps = []

    def evaluate(*args, alpha, **kwargs):
        steps.append(alpha)
        return job_evaluate(*args, alpha=alpha, **kwargs)

    job_evaluate = job.evaluate
    monkeypatch.setattr(job, "evaluate", evaluate)
    records = {}
    for name, extra in (("default", []), ("given", ["--eval-alpha", "0.02"])):
        outdir = tmp_path / name
        assert main(["robust", "train", "--outdir", str(outdir), "--epochs", "1", *QUICK, *extra]) == 0
        records[name] = json.loads((outdir / "metrics.json").read_text())
    # The default is 2.5 eps / eval attack steps (eps 0.1, 3 steps); a given step is the attack's.
    assert steps == [pytest.approx(2.5 * 0.1 / 3), 0.02]
    assert records["default"]["eval_alpha"] == pytest.approx(2.5 * 0.1 / 3)
    assert records["given"]["eval_alpha"] == 0.02 and records["given"]["eval_attack"] == "pgd3x1"


def test_the_paper_config_evaluates_as_the_wong_et_al_figure_requires():
    """Wong et al.'s evaluate_pgd: PGD-50, 10 restarts, step 2/255, every CIFAR-10 test image."""
    from pathlib import Path

    import yaml

    from membench.report.headlines import default_headlines_dir, load_headline

    repo = Path(__file__).resolve().parents[2]
    robust = yaml.safe_load((repo / "config" / "paper" / "robust.yaml").read_text())["robust"]
    figures = {f.id: f for f in load_headline(default_headlines_dir() / "robust.yaml").figures}
    requires = figures["robust_wong_fgsm_robust"].requires
    evaluation = robust["eval"]
    attack = f"pgd{evaluation['attack_steps']}x{evaluation['restarts']}"
    assert attack == requires["eval_attack"] == "pgd50x10"
    assert evaluation["alpha"] == pytest.approx(2 / 255) == pytest.approx(requires["eval_alpha"], rel=1e-6)
    # No sample cap: all of CIFAR-10's 10,000 test images.
    assert evaluation.get("samples") is None and robust.get("test_limit") is None
    assert requires["test_samples"] == figures["robust_wong_fgsm_clean"].requires["test_samples"] == 10_000


def test_bad_data_file_gives_a_one_line_error(tmp_path, capsys):
    (tmp_path / "mnist").mkdir()
    code = main(
        [
            "robust",
            "train",
            "--outdir",
            str(tmp_path / "out"),
            "--dataset",
            "mnist",
            "--root",
            str(tmp_path / "mnist"),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "train-images-idx3-ubyte: MNIST file not found" in err


def _metrics(tmp_path, name, **fields):
    record = {
        "system": "robust",
        "variant": name,
        "dataset": "digits",
        "device": "cpu",
        "device_name": "cpu",
        "torch_version": "x",
        "seed": 0,
        "batch_size": 64,
        "wall_s": 1.0,
        "attack": "pgd",
        "eps": 0.1,
        "epochs": 8,
        "clean_accuracy": 0.98,
        "robust_accuracy": 0.83,
        "samples_per_s": 1.0,
        "staleness_mean": 0.0,
        "staleness_max": 0,
        "publish_every": None,
        "threads": 1,
        "producers": 0,
        **{f: None for f in MEASURED_FIELDS},
        **fields,
    }
    path = tmp_path / name / "metrics.json"
    path.parent.mkdir()
    path.write_text(json.dumps(record))
    return path


def test_scaling_table_sets_runs_against_the_fastest_sequential_run_on_their_cores(tmp_path):
    paths = [
        _metrics(tmp_path, "seq-pgd4-t1", mode="sequential", attack_steps=4, cores=1, train_wall_s=10.0),
        _metrics(
            tmp_path,
            "seq-pgd4-t2",
            mode="sequential",
            attack_steps=4,
            cores=2,
            train_wall_s=8.0,
            threads=2,
            robust_accuracy=0.80,
        ),
        _metrics(tmp_path, "seq-pgd2-t1", mode="sequential", attack_steps=2, cores=1, train_wall_s=6.0),
        _metrics(
            tmp_path,
            "par-pgd4-p1-k1",
            mode="parallel",
            attack_steps=4,
            cores=2,
            producers=1,
            publish_every=1,
            train_wall_s=4.0,
            robust_accuracy=0.82,
        ),
        _metrics(
            tmp_path,
            "par-pgd4-p2-k1",
            mode="parallel",
            attack_steps=4,
            cores=3,
            producers=2,
            publish_every=1,
            train_wall_s=2.0,
        ),
        _metrics(
            tmp_path,
            "par-pgd2-p1-k1",
            mode="parallel",
            attack_steps=2,
            cores=2,
            producers=1,
            publish_every=1,
            train_wall_s=3.0,
        ),
    ]
    table = scaling_table(paths, attack_steps=4, weak_base_attack_steps=2)
    rows = {(r.variant, r.scaling): r for r in table.itertuples()}
    assert rows[("par-pgd4-p1-k1", "strong")].speedup == pytest.approx(2.0)
    assert rows[("par-pgd4-p1-k1", "strong")].baseline_variant == "seq-pgd4-t2"
    assert rows[("par-pgd4-p1-k1", "strong")].robust_accuracy_delta == pytest.approx(0.02)
    assert rows[("par-pgd4-p2-k1", "weak")].speedup == pytest.approx(4.0)  # weak: 2 x 2 steps
    assert ("par-pgd4-p2-k1", "strong") in rows and ("par-pgd2-p1-k1", "weak") in rows
    assert rows[("seq-pgd4-t1", "sequential")].speedup == pytest.approx(1.0)  # only itself on one core
    assert list(table.columns[:11]) == [
        "mode",
        "attack",
        "producers",
        "eps",
        "epochs",
        "clean_accuracy",
        "robust_accuracy",
        "samples_per_s",
        "wall_s",
        "staleness_mean",
        "staleness_max",
    ]
    out = tmp_path / "robust.csv"
    table.to_csv(out, index=False)
    assert main(["robust", "plot-scaling", "--table", str(out), "--out", str(tmp_path / "s.png")]) == 0
    assert main(["robust", "plot-staleness", "--table", str(out), "--out", str(tmp_path / "t.png")]) == 0
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


def test_plan_names_baselines_for_strong_and_weak_scaling():
    from pathlib import Path

    import yaml

    config = yaml.safe_load((Path(__file__).parents[2] / "config" / "config.yaml").read_text())["robust"]
    config |= {
        "root": None,
        "test_fraction": 0.2,
        "train_limit": None,
        "test_limit": None,
        "momentum": 0.9,
        "weight_decay": 0.0,
        "timeout_s": 300,
        "queue_size": None,
        "transport": "shared_memory",
        "guard": {"attack_steps": 10, "samples": 256, "drop": 0.5, "action": "shrink", "shrink": 0.5},
    }
    config["sequential_threads"] = [1, 2]
    config["publish_every"] = [1, 4]  # the paper's k; the default config runs k = 1 only
    config["hard_eps"] = [0.2]  # the default config leaves the eps 0.2 run off
    runs = plan_runs(config)
    names = {name.split("/", 2)[2] for name in runs if "/eps0.1/" in name}
    assert {
        "seq-pgd10-t1",
        "seq-pgd10-t2",
        "seq-pgd5-t1",
        "seq-pgd5-t2",
        "par-pgd10-p1-k1",
        "par-pgd10-p2-k4",
        "par-pgd5-p1-k1",
        "seq-fgsm-t1",
    } <= names
    assert "par-pgd5-p2-k1" not in names  # weak scaling at P = 2 runs PGD-10, already in the strong series
    assert "digits/eps0.2/seq-pgd10-t2" in runs
