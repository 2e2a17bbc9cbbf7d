"""Checks on the figures a plot function draws (``import figures``; ``tests/`` is on pytest's
``pythonpath``)::

    drawn = figures.capture(monkeypatch, membench.division.plots)
    plot_speed(table, tmp_path / "speed.png")
    figures.assert_readable(drawn, tmp_path / "speed.png")

``capture`` records every figure the module saves (and still writes it); ``assert_readable``
checks that the PNG was written, that no panel is empty, that bars take their colours from the
one method mapping, and that no title is a file path.
"""

from __future__ import annotations

from matplotlib.colors import to_hex

from membench.core import plots

_ALLOWED_BAR_COLOURS = {c.lower() for c in (*plots.METHOD_COLOURS.values(), *plots._SPARE_COLOURS)} | {
    "#ffffff"
}


def capture(monkeypatch, module) -> list:
    drawn = []

    def save(fig, path):
        drawn.append(fig)
        plots.save_figure(fig, path)

    monkeypatch.setattr(module, "save_figure", save)
    return drawn


def bar_colours(fig) -> set[str]:
    """Face colours of the bars (rectangles in the data area) of every panel."""
    from matplotlib.patches import Rectangle

    return {to_hex(p.get_facecolor()) for ax in fig.axes for p in ax.patches if isinstance(p, Rectangle)}


def assert_readable(drawn: list, *pngs) -> None:
    assert drawn, "no figure was saved"
    for png in pngs:
        assert png.stat().st_size > 0
    for fig in drawn:
        width_in, _ = fig.get_size_inches()
        assert width_in <= plots.REPORT_WIDTH_IN, "wider than the report"
        for ax in fig.axes:
            has_data = bool(ax.patches or ax.lines or ax.images or ax.collections)
            assert has_data or ax.get_legend() is not None, f"empty panel {ax.get_title()!r}"
            title = ax.get_title()
            assert not title.startswith(("/", "results/")) and not title.endswith((".csv", ".png")), title
        assert bar_colours(fig) <= _ALLOWED_BAR_COLOURS, bar_colours(fig) - _ALLOWED_BAR_COLOURS
