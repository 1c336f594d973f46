"""The overlaid comparison chart (pgnn.viz.compare): two experiments give one line each in both panels, in
the same colour in both, one legend entry each; the PNG's bytes depend on the curves only."""

from __future__ import annotations

from pathlib import Path

from pgnn.viz.compare import compare_chart, compare_figure

LOSS = {"fast": ([10, 20, 30], [0.9, 0.5, 0.3]), "slow": ([10, 20, 30], [0.95, 0.8, 0.6])}
VAL = {"fast": ([20, 40], [40.0, 55.0]), "slow": ([20, 40], [20.0, 30.0])}


def test_one_line_per_experiment_per_panel() -> None:
    fig = compare_figure(LOSS, VAL, val_label="Car/3d/moderate")
    loss_ax, val_ax = fig.axes
    for ax, series in ((loss_ax, LOSS), (val_ax, VAL)):
        lines = ax.get_lines()
        assert [line.get_label() for line in lines] == list(series)
        for line, (steps, values) in zip(lines, series.values(), strict=True):
            assert list(line.get_xdata()) == steps and list(line.get_ydata()) == values
    assert [line.get_color() for line in loss_ax.get_lines()] == [
        line.get_color() for line in val_ax.get_lines()
    ]
    assert len({line.get_color() for line in loss_ax.get_lines()}) == 2
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["fast", "slow"]
    assert "Car/3d/moderate" in val_ax.get_title()


def test_a_run_without_curves_keeps_its_legend_entry_and_colour() -> None:
    fig = compare_figure({**LOSS, "empty": ([], [])}, {"empty": ([], []), **VAL})
    assert len(fig.axes[0].get_lines()) == 2 and len(fig.axes[1].get_lines()) == 2
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["fast", "slow", "empty"]


def test_png_is_written_and_deterministic(tmp_path: Path) -> None:
    a = compare_chart(LOSS, VAL, tmp_path / "a.png")
    b = compare_chart(LOSS, VAL, tmp_path / "b.png")
    assert a.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert a.read_bytes() == b.read_bytes()
    changed = compare_chart(LOSS, {**VAL, "slow": ([20, 40], [20.0, 35.0])}, tmp_path / "c.png")
    assert changed.read_bytes() != a.read_bytes()
