"""`tune`: the recall@k and QPS of an index's search settings against exact search of its own vectors, and the
fastest setting that meets a target recall, recorded in the index (`layout.write_tuned`).

A ScaNN index is measured over a grid of leaves searched (fractions of its leaves) and reordering pools
(`reorder_factor`, candidates rescored on int8 a result); an int8 or binary exact index over its `rescore`
pools; then the parameters of the fastest setting that meets the target are bisected towards the grid's
next smaller value (`BISECTED`), where the grid's steps may have skipped a cheaper setting that meets it.
The exact answers are those of the vectors the index holds: a ScaNN index's int8 copy decoded (ScaNN keeps
no float32), an exact index's float32. Queries are either held-out vectors or a sample of the
index's own rows; a sampled row is its own best match, so it is left out of both answers, which are then the
`k` best other rows. QPS is that of one batched `search` of every query at `k`, the best of `repeats` runs.
"""

import os
import shutil
import tempfile
import time

import numpy as np

from gtr_keras.errors import UserError
from gtr_keras.index.layout import (
    SCANN_DIR,
    SCANN_INT8_DATASET,
    SCANN_INT8_MULTIPLIERS,
    SEARCH_INDEX_DIRECTORY,
    TUNE_PLOT,
    read_description,
    search_settings,
    write_tuned,
)
from gtr_keras.index.quantized_vectors import FloatVectors
from gtr_keras.index.search_index import SearchIndex, write_search_index
from gtr_keras.index.segmented_index import SegmentedIndex
from gtr_keras.tuning.recall_curve import plot_recall_qps
from gtr_keras.utils import files
from gtr_keras.utils.files import atomic_directory
from gtr_keras.utils.records import check_positive_int

# The grid: leaves searched as fractions of a ScaNN index's leaves, its reordering pools (results times
# these), and a quantized exact index's rescored candidates (k times these).
LEAF_FRACTIONS = (0.005, 0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.25)
REORDER_FACTORS = (5, 10, 20, 30, 50, 70, 100, 150, 200)
RESCORE_MULTIPLES = (1, 2, 4, 10, 20, 50)
# After the grid, the chosen setting's parameters are bisected towards the grid's next smaller value, in this
# order, this many times each.
BISECTED = ("reorder_factor", "num_leaves_to_search", "rescore")
BISECTIONS = 3
# With `build=True`, ScaNN builds of these multiples of the index's leaves and these AH block widths too.
BUILD_LEAF_SCALES = (0.5, 1.0, 2.0)
BUILD_DIMENSIONS_PER_BLOCK = (2, 4)
_CHUNK_ROWS = 65_536


class DecodedRows:
    """The int8 rows of a ScaNN searcher decoded to float32 (`int8 / multiplier`, per dimension), a slice at a
    time: what ScaNN reorders with, and so what exact search of a ScaNN index's vectors scores."""

    def __init__(self, scann_dir):
        self.codes = np.load(os.path.join(scann_dir, SCANN_INT8_DATASET), mmap_mode="r")
        self.multipliers = np.load(os.path.join(scann_dir, SCANN_INT8_MULTIPLIERS))
        self.shape = self.codes.shape

    def __getitem__(self, rows):
        return np.asarray(self.codes[rows], dtype=np.float32) / self.multipliers


class DecodedSource:
    """A ScaNN index's decoded int8 vectors as a `write_search_index` source (`ids`, `dims`, `num_rows`,
    `chunks()`): what a build of other leaves or blocks is trained on, the float32 vectors being gone."""

    def __init__(self, index):
        self.ids = list(index.ids)
        self.rows = DecodedRows(os.path.join(index.path, SCANN_DIR))
        self.num_rows, self.dims = self.rows.shape

    def chunks(self):
        for start in range(0, self.num_rows, _CHUNK_ROWS):
            yield self.rows[start : start + _CHUNK_ROWS]


def build_grid(params, n):
    """The ScaNN builds `tune(build=True)` measures: `num_leaves` scaled by `BUILD_LEAF_SCALES` (at most one
    leaf a 10 rows) times `BUILD_DIMENSIONS_PER_BLOCK`, as overrides of `params`; the index's own first."""
    builds = [{"num_leaves": params["num_leaves"], "dimensions_per_block": params["dimensions_per_block"]}]
    for scale in BUILD_LEAF_SCALES:
        leaves = max(1, min(n // 10, round(params["num_leaves"] * scale)))
        for block in BUILD_DIMENSIONS_PER_BLOCK:
            build = {"num_leaves": leaves, "dimensions_per_block": block}
            if build not in builds:
                builds.append(build)
    return [
        {
            **build,
            "num_leaves_to_search": min(build["num_leaves"], params["num_leaves_to_search"]),
            "training_sample_size": min(n, max(params["training_sample_size"], 100 * build["num_leaves"])),
        }
        for build in builds
    ]


def settings_grid(index, k):
    """The search settings `tune` measures for a loaded `index` (see the module's grid), as dicts."""
    first = index.parts[0][0]
    names = search_settings(index.kind, first.params)
    if not names:
        raise UserError(
            f"a {index.kind} index of float32 vectors has no search setting to tune (its search is exact); "
            "tune a ScaNN index, or one built with `index --vectors int8|binary`"
        )
    params = first.params
    if index.kind == "scann":
        leaves = params["num_leaves"]
        searched = {min(leaves, max(1, round(leaves * f))) for f in LEAF_FRACTIONS} | {
            min(leaves, params["num_leaves_to_search"])
        }
        factors = set(REORDER_FACTORS) | {params["reorder_factor"]}
        return [{"num_leaves_to_search": s, "reorder_factor": r} for s in sorted(searched) for r in sorted(factors)]
    return [{"rescore": r} for r in sorted({k * m for m in RESCORE_MULTIPLES} | {params["rescore"]})]


def exact_twin(index):
    """An exact index over the vectors `index` holds (decoded int8 for ScaNN), its rows numbered as `index`'s."""
    twins = []
    for part, deleted in index.parts:
        floats = part.embeddings if part.kind == "exact" else DecodedRows(os.path.join(part.path, SCANN_DIR))
        twins.append((SearchIndex.from_vectors(part.ids, FloatVectors(floats)), deleted))
    return twins[0][0] if not isinstance(index, SegmentedIndex) else SegmentedIndex(twins, index.names)


def _sampled_rows(twin, rows):
    """The float32 vectors of live rows `rows` (sorted) of an exact index or `SegmentedIndex`."""
    out, first = [], 0
    for part, deleted in twin.parts:
        live = np.arange(len(part.ids)) if deleted is None else np.flatnonzero(~deleted)
        mine = rows[(rows >= first) & (rows < first + len(live))] - first
        out.append(np.asarray(part.embeddings[live[mine]], dtype=np.float32))
        first += len(live)
    return np.concatenate(out)


def _best_others(rows, own, k):
    """Each query's first `k` result rows that are not its own row (`own`; None: no query is an indexed row)."""
    if own is None:
        return rows[:, :k]
    return np.stack([row[row != me][:k] for row, me in zip(rows, own)])


def recall_at_k(found, truth):
    """The mean fraction of each query's true top `k` (`truth`, `[n, k]` rows) among its `found` rows."""
    return float(np.mean([len(np.intersect1d(f, t)) / t.shape[0] for f, t in zip(found, truth)]))


def measure(index, queries, truth, k, own=None, repeats=2):
    """`(recall@k, QPS)` of `index`'s current setting on `queries` against `truth` (`[n, k]` exact rows)."""
    found = _best_others(index.search(queries, k + (own is not None))[0], own, k)
    elapsed = []
    for _ in range(repeats):
        start = time.perf_counter()
        index.search(queries, k)
        elapsed.append(time.perf_counter() - start)
    return recall_at_k(found, truth), len(queries) / max(min(elapsed), 1e-9)


def tune(directory, queries=None, sample=1000, target_recall=0.95, k=10, plot=None, repeats=2, build=False, log=print):
    """Measures the search settings of the index in `directory` (the grid, then bisections between the
    fastest setting that meets `target_recall` and the grid's next smaller values), records the fastest that
    meets `target_recall` in it (`tuned.json`, which `SearchIndex.load` applies) and draws the recall-QPS curve.

    Args:
        directory: a local index directory (of `gtr-keras index`, or a search index).
        queries: float32 `[n, D]` held-out query vectors, or None to sample `sample` of the index's rows.
        sample: rows sampled (seed 0) as queries when `queries` is None.
        target_recall: the recall@k to meet, in (0, 1].
        k: results per query.
        plot: the `.png` to write (default: `tune-recall-qps.png` in the search index directory).
        repeats: timed runs per setting (the fastest counts).
        build: also measure ScaNN builds of other leaves and AH block widths (`build_grid`), trained on the
            index's decoded int8 vectors; if one of them holds the fastest setting, it replaces the index
            (atomically), and the record says which (`build`). For a ScaNN index without updates.
        log: called with each line of the table.

    Returns:
        The record written to `tuned.json`: `setting`, `recall`, `qps`, `k`, `target_recall`, `queries`,
        `measurements` (every setting's `recall` and `qps`), and `plot`, the PNG's path.

    Raises:
        UserError: an index with nothing to tune (exact float32), `build` for another than a ScaNN index of
            one segment, queries of other dims, or no setting that meets the target (nothing is recorded or
            rebuilt then; the plot is still drawn).

    Example:
    >>> tune("indexes/msmarco", sample=1000, target_recall=0.95)["setting"]  # doctest: +SKIP
    {'num_leaves_to_search': 70, 'reorder_factor': 20}
    """
    check_positive_int(k, "k")
    if not 0 < target_recall <= 1:
        raise UserError(f"target_recall must be in (0, 1], got {target_recall}")
    directory = read_description(directory)[0]
    if not files.is_local(directory):
        raise UserError(f"{directory}: tune reads the index's vectors through a memory map; copy it to a local disk")
    index = SearchIndex.load(directory)
    grid = settings_grid(index, k)
    twin = exact_twin(index)
    if queries is None:
        own = np.sort(np.random.default_rng(0).choice(len(index.ids), min(sample, len(index.ids)), replace=False))
        queries, described = _sampled_rows(twin, own), f"{len(own)} of the index's rows, sampled (seed 0)"
    else:
        own, queries, described = None, np.asarray(queries, dtype=np.float32), f"{len(queries)} held-out vectors"
        if queries.ndim != 2 or queries.shape[1] != index.dims:
            raise UserError(f"queries of shape {queries.shape}, the index has {index.dims} dims")
    if k + (own is not None) > len(index.ids):
        raise UserError(f"k={k} needs more than the index's {len(index.ids)} rows")
    truth = _best_others(twin.search(queries, k + (own is not None))[0], own, k)
    if build and (index.kind != "scann" or isinstance(index, SegmentedIndex)):
        raise UserError(
            f"{directory}: build=True rebuilds a ScaNN index of one segment; this one is {index.kind}"
            + (
                " with updates (compact it first: `gtr-keras index --update --compact`)"
                if index.kind == "scann"
                else ""
            )
        )
    measurements, built_by = [], []
    log(f"{'setting':<72} {'recall@' + str(k):>10} {'QPS':>10}")
    with tempfile.TemporaryDirectory(prefix=".tune-", dir=os.path.dirname(directory.rstrip("/"))) as scratch:
        builds = build_grid(index.params, len(index.ids)) if build else [None]
        paths, loaded = {}, {0: index}  # one other build loaded at a time

        def measured_at(number, setting):
            loaded[number].set_search_params(setting)
            recall, qps = measure(loaded[number], queries, truth, k, own, repeats)
            measured = {"setting": setting, "recall": round(recall, 4), "qps": round(qps, 1)}
            if builds[number] is not None:
                measured["build"] = {name: builds[number][name] for name in ("num_leaves", "dimensions_per_block")}
            measurements.append(measured)
            built_by.append(number)
            log(f"{_describe({**measured.get('build', {}), **setting}):<72} {recall:>10.4f} {qps:>10.1f}")
            return measured

        def load_build(number):
            for other in [n for n in loaded if n]:
                del loaded[other]
            if number:
                loaded[number] = SearchIndex.load(paths[number])

        for number, overrides in enumerate(builds):
            if number:
                paths[number] = os.path.join(scratch, str(number))
                write_search_index(DecodedSource(index), paths[number], "scann", {**index.params, **overrides})
                load_build(number)
            for setting in grid if not number else settings_grid(loaded[number], k):
                measured_at(number, setting)
        chosen = _fastest(measurements, target_recall)
        if chosen is not None:
            number = built_by[measurements.index(chosen)]
            load_build(number)
            tried = [m["setting"] for m, n in zip(measurements, built_by) if n == number]
            _bisect(chosen["setting"], tried, target_recall, lambda setting: measured_at(number, setting))
            chosen = _fastest(measurements, target_recall)
        number = built_by[measurements.index(chosen)] if chosen is not None else 0
        if number:  # another build holds the fastest setting: it replaces the index
            with atomic_directory(directory, [SEARCH_INDEX_DIRECTORY]) as staging:
                shutil.copytree(paths[number], staging, dirs_exist_ok=True)
    plot = plot or os.path.join(directory, TUNE_PLOT)
    curves = {}
    for m in measurements:
        name = _describe(m["build"]) if build else index.kind
        curves.setdefault(name, []).append((m["recall"], m["qps"]))
    where = chosen and (chosen["recall"], chosen["qps"])
    title = f"{os.path.basename(os.path.dirname(directory.rstrip('/')))}: {index.kind}, {len(index.ids)} rows"
    plot_recall_qps(curves, plot, title, where, target_recall)
    if chosen is None:
        best = max(measurements, key=lambda m: m["recall"])
        raise UserError(
            f"no setting reached recall@{k} {target_recall} (the best: {best['recall']} with "
            f"{_describe(best['setting'])}; plot: {plot}); nothing recorded: lower --target-recall, or rebuild "
            f"the index with more leaves"
        )
    record = {
        **({"build": chosen["build"]} if build else {}),
        "setting": chosen["setting"],
        "recall": chosen["recall"],
        "qps": chosen["qps"],
        "k": k,
        "target_recall": target_recall,
        "queries": described,
        "measurements": measurements,
    }
    write_tuned(directory, record)
    return {**record, "plot": plot}


def _bisect(setting, tried, target_recall, measured_at):
    """Measures settings between `setting` (the grid's fastest meeting `target_recall`) and the grid's next
    smaller value of each of its `BISECTED` parameters in turn, halving the gap `BISECTIONS` times: the
    smallest value that still meets the target, where the grid's steps skipped it."""
    setting = dict(setting)
    for name in (name for name in BISECTED if name in setting):
        low = max((s[name] for s in tried if s[name] < setting[name]), default=None)
        high = setting[name]
        for _ in range(BISECTIONS if low is not None else 0):
            middle = (low + high) // 2
            if middle in (low, high):
                break
            if measured_at({**setting, name: middle})["recall"] >= target_recall:
                high = middle
            else:
                low = middle
        setting[name] = high


def _fastest(measurements, target_recall):
    meeting = [m for m in measurements if m["recall"] >= target_recall]
    return max(meeting, key=lambda m: m["qps"]) if meeting else None


def _describe(setting):
    return ", ".join(f"{name}={value}" for name, value in setting.items())
