"""Report figures: confusion matrices of every estimator (k-fold split) and the estimator comparison."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from membench.core.plots import new_figure, save_figure


def plot_confusions(predictions: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """One panel per (dataset, estimator): true class (rows) against predicted class (columns),
    counts of the k-fold test predictions; cells below the diagonal are under-estimates."""
    kfold = predictions[(predictions["split"] == "kfold") & (predictions["pred_bin"] >= 0)]
    panels = sorted(kfold.groupby(["dataset", "estimator"]).groups) or [("", "")]
    fig, axes = new_figure(ncols=len(panels), width_in=2.6 * len(panels), height_in=3.0)
    for ax, (dataset, estimator) in zip(axes, panels):
        part = kfold[(kfold["dataset"] == dataset) & (kfold["estimator"] == estimator)]
        size = int(max(part["true_bin"].max(), part["pred_bin"].max(), 0)) + 1 if len(part) else 1
        matrix = np.zeros((size, size), dtype=int)
        np.add.at(matrix, (part["true_bin"].to_numpy(int), part["pred_bin"].to_numpy(int)), 1)
        ax.imshow(matrix, cmap="Blues")
        for (i, j), count in np.ndenumerate(matrix):
            if count:
                ax.text(j, i, str(count), ha="center", va="center", fontsize=7)
        ax.set_title(f"{dataset}\n{estimator}", fontsize=8)
        ax.set_xlabel("predicted class")
        ax.set_ylabel("true class")
    save_figure(fig, png_path)


def plot_comparison(table: pd.DataFrame, png_path: str | os.PathLike) -> None:
    """Accuracy and under-estimation rate of every estimator (k-fold), one group of bars per dataset."""
    fig, axes = new_figure(ncols=2, width_in=10.0, height_in=3.8)
    datasets = list(dict.fromkeys(table["dataset"]))
    estimators = list(dict.fromkeys(table["estimator"]))
    width = 0.8 / max(len(estimators), 1)
    for ax, metric, label in ((axes[0], "accuracy", "accuracy"), (axes[1], "under_rate", "under-estimation rate")):
        for k, estimator in enumerate(estimators):
            values = [table[(table["dataset"] == d) & (table["estimator"] == estimator)][metric].mean() for d in datasets]
            ax.bar(np.arange(len(datasets)) + k * width, values, width, label=estimator)
        ax.set_xticks(np.arange(len(datasets)) + 0.4 - width / 2, datasets, fontsize=8)
        ax.set_ylabel(label)
    axes[0].legend(fontsize=7)
    save_figure(fig, png_path)
