"""Figure helpers for the report: a headless backend and atomic PNG writes."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from membench.core import atomic  # noqa: E402


def new_figure(ncols: int = 1, width_in: float = 7.0, height_in: float = 4.0):
    """A figure of ``ncols`` panels side by side; returns ``(figure, list of axes)``."""
    fig, axes = plt.subplots(1, ncols, figsize=(width_in, height_in), layout="constrained", squeeze=False)
    return fig, list(axes[0])


def save_figure(fig, path: str | os.PathLike) -> None:
    """Write ``fig`` as PNG to ``path`` atomically and close it."""
    with atomic.atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


def plot_memlog(memlog, png_path: str | os.PathLike, title: str = "") -> None:
    """Memory over time from a job's ``memlog.csv`` frame, one line per available source."""
    fig, (ax,) = new_figure()
    for column, label in (
        ("rss_mib", "process RSS"),
        ("nvml_used_mib", "NVML memory.used"),
        ("cuda_allocated_mib", "CUDA allocated"),
    ):
        values = memlog[column].astype(float)
        if values.notna().any():
            ax.plot(memlog["t_s"], values, marker=".", label=label)
    for phase, rows in memlog.groupby("phase", sort=False):
        if rows["t_s"].max() <= rows["t_s"].min():
            continue
        ax.axvspan(rows["t_s"].min(), rows["t_s"].max(), alpha=0.08)
        ax.annotate(phase, (rows["t_s"].min(), 1.0), xycoords=("data", "axes fraction"), va="top", fontsize=8)
    ax.set_xlabel("time since job start (s)")
    ax.set_ylabel("MiB")
    ax.set_title(title)
    ax.legend(loc="lower right")
    save_figure(fig, png_path)
