"""The robust sweep of the workflow: which training runs the config asks for, and their options.

Runs are named ``<dataset>/eps<eps>/<variant>`` (variants as :func:`membench.robust.job.variant_name`):

- sequential PGD-K for every ``sequential_threads`` value, for K = ``attack_steps`` (strong scaling)
  and K = ``weak_base_attack_steps`` x P for each P (weak scaling): the baselines on the same cores;
- sequential FGSM-RS for every ``sequential_threads`` value when ``fgsm`` is on;
- parallel PGD-K with P producers publishing every k steps, for every P in ``producers`` and k in
  ``publish_every``, at K = ``attack_steps`` and at K = ``weak_base_attack_steps`` x P;
- sequential PGD-``attack_steps`` at each of ``hard_eps`` (the hard settings), on the most threads.
"""

from __future__ import annotations

__all__ = ["plan_runs", "run_cores", "spans_nodes"]

_DATA_KEYS = (
    "test_fraction",
    "train_limit",
    "test_limit",
    "model",
    "hidden_units",
    "epochs",
    "batch_size",
    "learning_rate",
    "optimizer",
    "learning_rate_schedule",
    "momentum",
    "weight_decay",
    "timeout_s",
)


def _eps_name(eps: float) -> str:
    return f"eps{eps:g}"


def plan_runs(robust: dict) -> dict[str, dict]:
    """Run name -> options of ``membench robust train`` (keys as the command's long options,
    underscores for dashes), for the config section ``robust``."""
    dataset, eps, threads = robust["dataset"], robust["eps"], robust["sequential_threads"]
    common = {key: robust[key] for key in _DATA_KEYS}
    common |= {"dataset": dataset, "root": robust.get("root")}
    common |= {f"eval_{key}": value for key, value in robust["eval"].items()}
    common |= {f"guard_{key}": value for key, value in robust["guard"].items()}
    runs: dict[str, dict] = {}

    def add(eps_value: float, variant: str, options: dict) -> None:
        runs[f"{dataset}/{_eps_name(eps_value)}/{variant}"] = {**common, "eps": eps_value, **options}

    step_counts = [robust["attack_steps"]] + [
        robust["weak_base_attack_steps"] * p for p in robust["producers"]
    ]
    for steps in dict.fromkeys(step_counts):
        for t in threads:
            add(
                eps,
                f"seq-pgd{steps}-t{t}",
                {"mode": "sequential", "attack": "pgd", "attack_steps": steps, "threads": t},
            )
        for p in robust["producers"]:
            if steps not in (robust["attack_steps"], robust["weak_base_attack_steps"] * p):
                continue
            for k in robust["publish_every"]:
                add(
                    eps,
                    f"par-pgd{steps}-p{p}-k{k}",
                    {
                        "mode": "parallel",
                        "attack": "pgd",
                        "attack_steps": steps,
                        "threads": 1,
                        "producers": p,
                        "publish_every": k,
                        "max_staleness": robust["max_staleness"],
                        "queue_size": robust["queue_size"],
                        "transport": robust["transport"],
                    },
                )
    if robust["fgsm"]:
        for t in threads:
            add(
                eps,
                f"seq-fgsm-t{t}",
                {"mode": "sequential", "attack": "fgsm", "attack_steps": 1, "threads": t},
            )
    for hard in robust["hard_eps"]:
        add(
            hard,
            f"seq-pgd{robust['attack_steps']}-t{max(threads)}",
            {
                "mode": "sequential",
                "attack": "pgd",
                "attack_steps": robust["attack_steps"],
                "threads": max(threads),
            },
        )
    return runs


def spans_nodes(options: dict, nodes: int) -> bool:
    """Whether a run's processes spread over ``nodes`` > 1 nodes (parallel, distributed transport)."""
    return nodes > 1 and options["mode"] == "parallel" and options["transport"] == "distributed"


def run_cores(options: dict, nodes: int = 1) -> int:
    """Cores a run keeps busy: its threads, times P + 1 processes when parallel on one node; the
    threads of one of its tasks when it spans nodes (Slurm gives each task its cores)."""
    if options["mode"] == "parallel" and not spans_nodes(options, nodes):
        return options["threads"] * (options["producers"] + 1)
    return options["threads"]
