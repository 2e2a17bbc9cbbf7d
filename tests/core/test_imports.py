"""Steps that only read tables or JSON and write tables or figures never import torch: importing it
costs a process about 1.5 s of CPU before it starts, and the workflow runs dozens of such steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

# Every step that does not compute with torch, with a command line ({tmp}: the test's directory).
# These run to the end, on inputs the test or an earlier step writes, in this order.
RUN_TO_THE_END: dict[str, list[str]] = {
    "appclass generate-rmat": [
        *("--scale", "4"),
        *("--vertices", "{tmp}/data.V.csv", "--edges", "{tmp}/data.E.csv"),
    ],
    "appclass generate-pattern": [
        *("--max-pattern-nodes", "3", "{tmp}/data.V.csv", "{tmp}/data.E.csv"),
        *("--vertices", "{tmp}/pattern.V.csv", "--edges", "{tmp}/pattern.E.csv"),
    ],
    "appclass graph-stats": [
        *("--out", "{tmp}/graphs.csv", "--pair", "rmat4"),
        *("{tmp}/data.V.csv", "{tmp}/data.E.csv", "{tmp}/pattern.V.csv", "{tmp}/pattern.E.csv"),
    ],
    "appclass plot": [
        *("--table", "{tmp}/appclass.csv"),
        *("--runtime-png", "{tmp}/runtime.png", "--speedup-png", "{tmp}/speedup.png"),
    ],
    "division plot-memory": ["--table", "{tmp}/division_memory.csv", "--out", "{tmp}/division_memory.png"],
    "division plot-speed": ["--table", "{tmp}/division_speed.csv", "--out", "{tmp}/division_speed.png"],
    "hotconv plot-sweep": ["--table", "{tmp}/hotconv_sweep.csv", "--out", "{tmp}/hotconv_sweep.png"],
    "memnet generate": ["--family", "mlp", "--count", "2", "--out", "{tmp}/configs.csv"],
    "memnet clean": [
        *("--configs", "{tmp}/configs.csv", "--measurements", "{tmp}/measurements.csv"),
        *("--family", "mlp", "--out", "{tmp}/jobs.csv"),
    ],
    "memnet table": ["--out", "{tmp}/memnet.csv", "{tmp}/evaluation.csv"],
    "meter plot": ["--memlog", "{tmp}/memlog.csv", "--out", "{tmp}/memlog.png"],
    "bodmas synthetic": ["--outdir", "{tmp}/bodmas", "--samples", "8", "--families", "2"],
    "bodmas classes": ["--metadata", "{tmp}/bodmas/metadata.csv", "--out", "{tmp}/classes.csv"],
}
# These, whose inputs take longer to write than the step takes to run, read an input that does
# not exist ({missing}); each runs until its reader stops it, having imported what it uses.
# ``images digits``, which reads nothing, stops at a setting it refuses, before it draws a digit.
STOPPED_AT_THEIR_INPUT: dict[str, list[str]] = {
    "hotconv sweep-table": ["--out", "{tmp}/sweep.csv", "{missing}"],
    "hotconv plot": [
        *("--table", "{missing}", "--sweep", "{tmp}/hotconv_sweep.csv"),
        *("--out", "{tmp}/hotconv.png"),
    ],
    "memnet plot": [
        *("--table", "{tmp}/memnet.csv", "--predictions", "{missing}"),
        *("--confusion-png", "{tmp}/confusion.png", "--comparison-png", "{tmp}/comparison.png"),
        *("--tradeoff-png", "{tmp}/tradeoff.png"),
    ],
    "robust table": [
        *("--out", "{tmp}/robust.csv", "{missing}"),
        *("--attack-steps", "3", "--weak-base-attack-steps", "1"),
    ],
    "robust plot-scaling": ["--table", "{missing}", "--out", "{tmp}/scaling.png"],
    "robust plot-staleness": ["--table", "{missing}", "--out", "{tmp}/staleness.png"],
    "bodmas elf": ["--outdir", "{tmp}/elf", "--search-dir", "{missing}"],
    "bodmas fold": [
        *("--metadata", "{missing}", "--binaries", "{tmp}/bodmas/binaries"),
        *("--dataset", "synthetic", "--fold", "0", "--outdir", "{tmp}/folds"),
    ],
    "bodmas stats": ["--out", "{tmp}/bodmas_stats.csv", "{missing}"],
    "bodmas plot-sizes": ["--out", "{tmp}/sizes.png", "{missing}"],
    "images digits": ["--outdir", "{tmp}/digits", "--image-size", "8"],
    "table metrics": ["--out", "{tmp}/metrics.csv", "{missing}"],
    "report table": ["--name", "division_speed", "--csv", "{missing}", "--out", "{tmp}/table.html"],
    "report provenance": [
        *("--command", "membench", "--config-json", "{missing}", "--default-config", "{missing}"),
        *("--schema", "{missing}", "--checkout", "{tmp}", "--out", "{tmp}/provenance.json"),
    ],
    "report summary": [
        *("--table", "{missing}", "--headline", "{missing}", "--provenance", "{missing}"),
        *("--out-html", "{tmp}/summary.html", "--out-fragment", "{tmp}/fragment.html"),
        *("--out-csv", "{tmp}/summary.csv", "--out-verdicts", "{tmp}/verdicts.csv"),
    ],
    "summary": ["--tables", "{missing}", "--headline", "{missing}"],
}
TORCH_FREE_STEPS = {**RUN_TO_THE_END, **STOPPED_AT_THEIR_INPUT}

# Runs each step through ``membench.cli.main`` in one process (a process costs more than most of
# the steps), noting whether the step's ``run`` was entered, how it ended, and whether torch has
# been imported by then.
_RUN_STEPS = """
import importlib, json, sys, types
from membench import cli

steps, report_path = json.loads(sys.argv[1]), sys.argv[2]
report, current = {}, None

def import_module(name, package=None):
    module = importlib.import_module(name, package)
    if not getattr(module.run, "noted", False):
        def run(args, _run=module.run):
            report[current]["entered"] = True
            return _run(args)
        run.noted = True
        module.run = run
    return module

cli.importlib = types.SimpleNamespace(import_module=import_module)
for current, argv in steps:
    report[current] = {"entered": False}
    try:
        ended = cli.main(current.split() + argv)
    except SystemExit as exc:
        ended = f"exit {exc.code}"
    except Exception as exc:
        ended = type(exc).__name__
    report[current].update(ended=ended, torch="torch" in sys.modules)
with open(report_path, "w") as handle:
    json.dump(report, handle)
"""


def _write_inputs(tmp: Path) -> None:
    """The tables the steps that run to the end read: a few rows of the columns each one uses."""
    timing = {
        "time_median_s": 1.0,
        "time_min_s": 0.9,
        "time_max_s": 1.1,
        "timing_reliable": True,
        "timing_flag": "",
    }
    pd.DataFrame(
        {
            "dataset": "rmat4/p3",
            "variant": ("reference-cpu-t1-float64", "torch-cpu-t2-float64"),
            "implementation": ("reference", "torch"),
            "data_edges": 69,
            "pattern_edges": 4,
            **timing,
        }
    ).to_csv(tmp / "appclass.csv", index=False)
    methods = ("vanilla", "division")
    pd.DataFrame(
        {
            "variant": methods,
            "batch_size": 32,
            "activation_mib": [4.0, 0.5],
            "step_alloc_peak_mib": [5.0, 1.5],
            "status": "ok",
        }
    ).to_csv(tmp / "division_memory.csv", index=False)
    pd.DataFrame({"variant": methods, "batch_size": 32, "images_per_s": [32.0, 24.0], **timing}).to_csv(
        tmp / "division_speed.csv", index=False
    )
    pd.DataFrame(
        {
            "variant": ("malconv2", "hotconv_eco"),
            "status": "ok",
            "max_len": 4096,
            "batch_size": 4,
            "step_alloc_peak_mib": [40.0, 4.0],
            "activation_mib": [9.6, 0.96],
            **timing,
        }
    ).to_csv(tmp / "hotconv_sweep.csv", index=False)
    pd.DataFrame(
        {"config_id": [0, 1], "filename": ["a.out", "b.out"], "status": ["FAILED", "TIMEOUT"]}
    ).to_csv(tmp / "measurements.csv", index=False)
    pd.DataFrame(
        {
            "dataset": ["mlp"],
            "estimator": ["faketensor"],
            "max_under": [0.05],
            "accuracy": [0.8],
            "under_rate": [0.04],
            "raw_accuracy": [0.7],
            "raw_under_rate": [0.1],
        }
    ).to_csv(tmp / "evaluation.csv", index=False)
    pd.DataFrame(
        {
            "t_s": [0.0, 0.1],
            "phase": "train",
            "rss_mib": [100.0, 120.0],
            "nvml_used_mib": None,
            "nvml_process_used_mib": None,
            "cuda_allocated_mib": None,
        }
    ).to_csv(tmp / "memlog.csv", index=False)


def test_steps_that_do_not_compute_with_torch_never_import_it(tmp_path):
    _write_inputs(tmp_path)
    steps = [
        [step, [arg.format(tmp=tmp_path, missing=tmp_path / "missing") for arg in argv]]
        for step, argv in TORCH_FREE_STEPS.items()
    ]
    process = subprocess.run(
        [sys.executable, "-c", _RUN_STEPS, json.dumps(steps), str(tmp_path / "report.json")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    # torch stays imported once a step imports it: the first step that shows it is the one.
    first = next((step for step, noted in report.items() if noted["torch"]), None)
    assert first is None, f"membench {first} imported torch"
    assert [step for step, noted in report.items() if not noted["entered"]] == []
    assert {step: report[step]["ended"] for step in RUN_TO_THE_END if report[step]["ended"] != 0} == {}
