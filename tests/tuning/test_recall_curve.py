"""`recall_curve`: the Pareto frontier of a library's settings, drawn as a PNG; one line without matplotlib."""

import sys

import pytest

from gtr_keras.errors import UserError
from gtr_keras.tuning.recall_curve import pareto_frontier, plot_recall_qps


def test_the_frontier_keeps_only_unbeaten_settings():
    points = [(0.5, 900.0), (0.9, 100.0), (0.8, 50.0), (0.95, 80.0), (0.95, 20.0), (0.7, 1000.0)]
    assert pareto_frontier(points) == [(0.7, 1000.0), (0.9, 100.0), (0.95, 80.0)]


def test_a_png_is_written_with_every_curve(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "plot.png"
    curves = {"a": [(0.9, 10.0), (0.99, 5.0)], "b": [(0.8, 20.0)]}
    plot_recall_qps(curves, str(path), "two", chosen=(0.99, 5.0), target=0.95)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UserError, match=r"pip install 'gtr-keras\[plots\]'"):
        plot_recall_qps({"a": [(0.9, 1.0)]}, str(tmp_path / "p.png"), "none")
    assert not (tmp_path / "p.png").exists()
