"""`plot_recall_qps`: recall-QPS curves as ann-benchmarks draws them (recall on x, queries a second on a log y)."""

import os
from collections.abc import Iterable, Mapping, Sequence

from gtr_keras.errors import UserError
from gtr_keras.utils.files import atomic_file

INSTALL_HINT = "the recall-QPS plot needs matplotlib: pip install 'gtr-keras[plots]'"


def plot_recall_qps(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    path: str | os.PathLike[str],
    title: str,
    chosen: tuple[float, float] | None = None,
    target: float | None = None,
) -> None:
    """Draws each curve's Pareto frontier (the settings no other one beats at once on recall and QPS) and
    writes a PNG to `path`, atomically.

    Args:
        curves: `{name: [(recall, qps), ...]}`, one curve a library or index.
        path: the `.png` to write (local or any file system TensorFlow knows).
        title: the plot's title.
        chosen: `(recall, qps)` marked with a star (the setting `tune` chose), or None.
        target: a recall drawn as a dotted vertical line, or None.

    Raises:
        UserError: matplotlib is not installed (`INSTALL_HINT`).

    Example:
    >>> plot_recall_qps({"scann": [(0.9, 2000.0), (0.99, 500.0)]}, "tune.png", "1M x 768", chosen=(0.99, 500.0))
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError as e:
        raise UserError(INSTALL_HINT) from e
    figure, axes = pyplot.subplots(figsize=(7, 5))
    for name, points in curves.items():
        frontier = pareto_frontier(points)
        axes.plot([r for r, _ in frontier], [q for _, q in frontier], "o-", markersize=4, label=name)
    if chosen is not None:
        axes.plot(*chosen, "*", markersize=16, color="black", label="chosen")
    if target is not None:
        axes.axvline(target, linestyle=":", color="grey")
    axes.set_yscale("log")
    axes.set_xlabel("recall@k")
    axes.set_ylabel("queries per second (log)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    with atomic_file(path) as f:
        figure.savefig(f, format="png", dpi=100)
    pyplot.close(figure)


def pareto_frontier(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The `(recall, qps)` points that no other point beats on both, by recall ascending.

    Example:
    >>> pareto_frontier([(0.9, 100.0), (0.8, 50.0), (0.95, 80.0)])
    [(0.9, 100.0), (0.95, 80.0)]
    """
    frontier: list[tuple[float, float]] = []
    for recall, qps in sorted(points, key=lambda p: (-p[0], -p[1])):
        if not frontier or qps > frontier[-1][1]:
            frontier.append((recall, qps))
    return frontier[::-1]
