"""`tune`: the recall@k and QPS of an index's search settings against exact float32 search, measured on queries
held out from those it chose on, and the fastest setting that meets a target recall, recorded in the index
(`layout.write_tuned`).

A ScaNN index is measured over a grid of leaves searched (fractions of its leaves), reordering pools
(`reorder_factor`, AH candidates reordered on int8 a result) and float32 rescoring pools (`rescore_factor`: of
the int8-reordered candidates, `search_index.rescore_pool_size(k, rescore_factor)` rescored with float32, at most
the reordering pool, or none, 0: ScaNN's int8 order is the answer; for each leaves and reordering pool, the next
larger rescoring pool only while the last one raised recall); an int8 or binary exact index over its `rescore`
pools. Once a setting meets the target, a
setting measured `SLOWER` times slower than it cannot be chosen, nor can any setting at least as large in every
parameter (it searches at least as much): those are not measured. Then the parameters of the fastest setting that
meets the target are bisected towards the grid's next smaller value (`BISECTED`), where the grid's steps may
have skipped a cheaper setting that meets it.

The truth is exact search of the index's float32 vectors: what a user's recall is counted against. A ScaNN
index built with `reorder: "int8"` keeps none (only ScaNN's int8 copy): its truth is that copy, decoded, and
`tune` says so, since its recall against float32 search stops below what is measured.

The queries are held-out vectors (`queries`, real queries where there are some) or a sample of the index's own
rows, each left out of its own answer (document rows: nearer their neighbours than a real query is). They are
split in two halves of one distribution: settings are measured and chosen on the tuning half only, where a
setting must reach the target plus a margin for the half's size (`needed_recall`; a target that the half cannot
show at any recall is refused before any search, with the number of queries that can, `queries_to_show`), and
the fastest of those is checked once on the held-out half: recorded, with both recalls, if it meets the target
there, else refused (trying the next fastest there would make its held-out recall biased). Recalls are compared
unrounded. QPS is that of one batched `search` of the tuning half at `k`, the best of `repeats` runs.
"""

import contextlib
import logging
import math
import os
import shutil
import tempfile

import numpy as np

from gtr_keras.errors import UserError
from gtr_keras.storage.layout import (
    EMBEDDINGS_NPY,
    INDEX_SUBDIR,
    RETRIEVER_JSON,
    SCANN_DIR,
    SEARCH_INDEX_DIRECTORY,
    TUNE_PLOT,
    TUNE_SCRATCH_PREFIX,
    check_embeddings,
    is_tune_scratch,
    read_description,
    search_settings,
    write_description,
    write_tuned,
)
from gtr_keras.storage.search_index import SearchIndex, rescore_pool_size, write_search_index
from gtr_keras.storage.segments import read_manifest
from gtr_keras.tuning.recall import (
    MARGIN_Z,
    DecodedRows,
    exact_twin,
    measure,
    needed_recall,
    read_in_order,
    split_queries,
)
from gtr_keras.tuning.recall_curve import plot_recall_qps
from gtr_keras.utils import files
from gtr_keras.utils.file_operations import crashed
from gtr_keras.utils.files import atomic_directory
from gtr_keras.utils.locks import output_lock
from gtr_keras.utils.records import check_positive_int

logger = logging.getLogger(__name__)

# The grid: leaves searched as fractions of a ScaNN index's leaves, its reordering pools (results times
# these), its float32 rescoring pools (`rescore_pool_size` of these, at most the reordering pool; 0 rescores none,
# and 1, int8's own top k rescored, finds the same rows as 0, more slowly), and a quantized exact index's rescored
# candidates (k times these).
LEAF_FRACTIONS = (0.001, 0.002, 0.003, 0.005, 0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.25, 0.4, 0.6, 1.0)
REORDER_FACTORS = (5, 10, 20, 30, 40, 50, 70, 85, 100, 150, 200, 300, 500, 1000)
RESCORE_FACTORS = (0, 2, 3, 5, 10)
RESCORE_MULTIPLES = (1, 2, 4, 10, 20, 50)
# Once a setting meets the target, one measured SLOWER times slower cannot be chosen, nor can any setting of the
# grid at least as large in every parameter (it searches at least as much): those are not measured.
SLOWER = 1.5
# After the grid, the chosen setting's parameters are bisected towards the grid's next smaller value, in this
# order, this many times each.
BISECTED = ("reorder_factor", "rescore_factor", "num_leaves_to_search", "rescore")
BISECTIONS = 3
# With `build=True`, ScaNN builds of these multiples of the index's leaves and these AH block widths too.
BUILD_LEAF_SCALES = (0.5, 1.0, 2.0)
BUILD_DIMENSIONS_PER_BLOCK = (2, 4)
_CHUNK_ROWS = 65_536
INT8_TRUTH = (
    "keeps no float32 vectors (built with reorder 'int8', only ScaNN's int8 copy): recall is measured "
    "against exact search of that copy, and recall against float32 search stops below it (0.93-0.97 in the "
    "project's runs; not measurable without the float32 vectors); rebuild it with `gtr-keras index` for float32 "
    "rescoring"
)


class BuildSource:
    """A ScaNN index's vectors as a `write_search_index` source (`ids`, `dims`, `num_rows`, `chunks()`), what a
    build of other leaves or blocks is trained on: its float32 vectors, or its decoded int8 copy without them."""

    def __init__(self, index):
        self.ids = list(index.ids)
        self.rows = read_in_order(index)
        if self.rows is None:
            self.rows = DecodedRows(os.path.join(index.path, SCANN_DIR))
        self.num_rows, self.dims = self.rows.shape

    def chunks(self):
        for start in range(0, self.num_rows, _CHUNK_ROWS):
            yield np.asarray(self.rows[start : start + _CHUNK_ROWS], dtype=np.float32)


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
    names = _tunable(index.kind, first.params)
    params = first.params
    if index.kind == "scann":
        leaves = params["num_leaves"]
        searched = {min(leaves, max(1, round(leaves * f))) for f in LEAF_FRACTIONS} | {
            min(leaves, params["num_leaves_to_search"])
        }
        factors = sorted(set(REORDER_FACTORS) | {params["reorder_factor"]})
        rescores = sorted(set(RESCORE_FACTORS) | {params["rescore_factor"]}) if "rescore_factor" in names else [None]
        return [
            {"num_leaves_to_search": s, "reorder_factor": r, **({"rescore_factor": f} if f is not None else {})}
            for s in sorted(searched)
            for r in factors
            for f in rescores
            if f is None or rescore_pool_size(k, f) <= r * k  # a larger rescoring pool is the reordering pool
        ]
    return [{"rescore": r} for r in sorted({k * m for m in RESCORE_MULTIPLES} | {params["rescore"]})]


def _lock_of(directory):
    """`(output, inside)` locked while an index is tuned: the index directory holding the search index
    `directory` (as `gtr-keras tune --index` and the writers of the index lock it), else `directory`."""
    parent = os.path.dirname(directory.rstrip("/"))
    if os.path.basename(directory.rstrip("/")) == INDEX_SUBDIR and files.isfile(os.path.join(parent, RETRIEVER_JSON)):
        return parent, (INDEX_SUBDIR,)
    return directory, ()


def scratch_paths(directory):
    """The scratch directories that `tune --build` runs of the search index `directory` made beside it:
    `.tune-NAME-` and `tempfile.mkdtemp`'s 8 characters exactly (`_scratch`), so that the scratch of a sibling
    index `NAME-OTHER` (`.tune-NAME-OTHER-*`, whose `-` mkdtemp never writes) is not among them."""
    parent, name = files.parent_and_name(directory)
    return [os.path.join(parent, entry) for entry in files.listdir(parent) if is_tune_scratch(entry, name)]


def remove_scratch(directory):
    """Removes the scratch that killed `tune --build` runs of the search index `directory` left beside it
    (`scratch_paths`); returns the paths removed. Only under the index's lock (`tune` holds it): no other run
    is using them."""
    stale = scratch_paths(directory)
    for path in stale:
        files.remove(path)
    return stale


@contextlib.contextmanager
def _scratch(directory):
    """A new scratch directory beside the search index `directory` (on its disk: builds are its size), removed
    after the block unless a crash point stopped it (as a kill would: the next `tune` removes it then)."""
    parent, name = files.parent_and_name(directory)
    path = tempfile.mkdtemp(prefix=f"{TUNE_SCRATCH_PREFIX}{name}-", dir=parent)
    try:
        yield path
    finally:
        if not crashed():
            shutil.rmtree(path, ignore_errors=True)


def _rescoring_like(build, index, built):
    """`build` (a ScaNN index over `index`'s rows in their order, written without float32) rescoring with
    `index`'s float32 rows, as it will once it replaces `index`, with the rescoring of `built` (the params its
    `index.json` holds, which measuring does not change): the builds `tune --build` measures share them."""
    if index.float_rows is not None:
        build.float_rows, build.embeddings = index.float_rows, index.embeddings
        build.params.update(reorder=built["reorder"], rescore_factor=built["rescore_factor"])
    return build


def tune(directory, queries=None, sample=1000, target_recall=0.95, k=10, plot=None, repeats=2, build=False):
    """Measures the search settings of the index in `directory` (the grid, then bisections between the
    fastest setting that meets `target_recall` and the grid's next smaller values) on half the queries, chooses
    the fastest that meets it there (with the margin of `needed_recall`), checks that one setting once on the
    other half, and records it in the index if it meets `target_recall` there too (`tuned.json`, which
    `gtr_keras.Index.open` applies); draws the recall-QPS curve. Each line of the table is logged (INFO).

    Args:
        directory: a local index directory (of `gtr-keras index`, or a search index).
        queries: float32 `[n, D]` held-out query vectors, or None to sample `sample` of the index's rows.
        sample: rows sampled (seed 0) as queries when `queries` is None.
        target_recall: the recall@k to meet on the held-out half, in (0, 1].
        k: results per query.
        plot: the `.png` to write (default: `tune-recall-qps.png` in the search index directory).
        repeats: timed runs per setting (the fastest counts).
        build: also measure ScaNN builds of other leaves and AH block widths (`build_grid`), trained on the
            index's float32 vectors (its decoded int8 copy where it keeps none); if one of them holds the
            fastest setting, it replaces the index (atomically), and the record says which (`build`). For a
            ScaNN index without updates. Its scratch (`.tune-*` beside the search index) is removed at the
            end, and by the next run when a kill left it.

    Returns:
        The record written to `tuned.json`: `setting`, `recall` (on the held-out half), `tuning_recall`,
        `qps`, `k`, `target_recall`, `queries` (what they are), `tuning_queries` and `held_out_queries`
        (how many), `truth` (`"float32"`, or `"int8"` for an index without float32 vectors),
        `measurements` (every setting's `recall` and `needed` on the tuning half, `qps`, and `held_out`
        for the one checked), and `plot`, the PNG's path. Recalls are compared unrounded and recorded to 4
        digits.

    Raises:
        UserError: an index with nothing to tune (exact float32), `build` for another than a ScaNN index of
            one segment, queries that are not finite float vectors of the index's dims, fewer than 2 queries, a
            target that the tuning half cannot show (its needed recall above 1: the message says how many
            queries can), no setting that meets it on the tuning half, or a chosen setting that misses it on
            the held-out half (another is not tried there: that would make the held-out recall biased). Nothing
            is recorded or rebuilt then; the plot is still drawn, before the last two.

    Example:
    >>> tune("indexes/msmarco", sample=1000, target_recall=0.95)["setting"]  # doctest: +SKIP
    {'num_leaves_to_search': 70, 'reorder_factor': 20, 'rescore_factor': 2}
    """
    check_positive_int(k, "k")
    if not 0 < target_recall <= 1:
        raise UserError(f"target_recall must be in (0, 1], got {target_recall}")
    directory = read_description(directory)[0]
    if not files.is_local(directory):
        raise UserError(f"{directory}: tune reads the index's vectors through a memory map; copy it to a local disk")
    with output_lock(*_lock_of(directory)):
        files.remove_staging(directory)  # what a run killed while it replaced the index with a build left
        remove_scratch(directory)
        return _tune(directory, queries, sample, target_recall, k, plot, repeats, build)


def check_queries(queries, dims):
    """Held-out query vectors for `tune`: float32 `[n, D]`, finite, of the index's `dims`; a `UserError` says what
    is wrong (`gtr-keras tune` puts `--queries PATH: ` before it)."""
    queries = check_embeddings(queries, "queries")
    if queries.shape[1] != dims:
        raise UserError(f"queries of {queries.shape[1]} dims, the index has {dims}")
    return queries


def queries_to_show(target, k):
    """The fewest queries (both halves) whose tuning half can show `target` with a margin: all found, it would
    need a recall at most halfway from `target` to 1 (`needed_recall` with the variance floor of `k` neighbours).

    Example:
    >>> queries_to_show(0.999, 10)
    2163
    """
    if target == 1:
        return 2
    tuning = math.ceil(4 * MARGIN_Z**2 * target / (k * (1 - target)))
    while needed_recall(target, np.ones(tuning), k) > (1 + target) / 2:
        tuning += 1
    return max(2, 2 * tuning - 1)


def check_request(directory, target_recall, k, build, count, sampled):
    """The checks of a `tune` of the search index `directory` that read its description only, made before any
    search (and by `gtr-keras tune` before it encodes a queries file): something to tune, `build` only for a
    ScaNN index of one segment, at least 2 queries (`count`: `sampled` rows, or held-out queries), and a
    target that their tuning half can show (`queries_to_show`). Raises `UserError` naming what is wrong."""
    directory, _, config = read_description(directory)
    _tunable(config["kind"], config["params"])
    manifest = read_manifest(directory)
    if build and (config["kind"] != "scann" or (manifest is not None and manifest["generation"])):
        raise UserError(
            f"{directory}: build=True rebuilds a ScaNN index of one segment; this one is {config['kind']}"
            + (
                " with updates (compact it first: `gtr-keras update INDEX --compact`)"
                if config["kind"] == "scann"
                else ""
            )
        )
    if count < 2:
        raise UserError(
            f"tune needs at least 2 queries (half to tune on, half to check on), got {count}: "
            "raise --sample or give more --queries"
        )
    tuning = count - count // 2
    needed = needed_recall(target_recall, np.ones(tuning), k)
    if needed > 1:
        enough = queries_to_show(target_recall, k)
        raise UserError(
            f"{tuning} tuning queries cannot show recall@{k} {target_recall}: all found, they would need "
            f"{needed:.4f} for the margin of their number; "
            f"use {f'--sample >= {enough}' if sampled else f'>= {enough} --queries'}"
        )


def _tunable(kind, params):
    """The search settings of an index of `kind` and `params` (`layout.search_settings`), or a `UserError`."""
    names = search_settings(kind, params)
    if not names:
        raise UserError(
            f"a {kind} index of float32 vectors has no search setting to tune (its search is exact); "
            "tune a ScaNN index, or one built with `index --vectors int8|binary`"
        )
    return names


def _tune(directory, queries, sample, target_recall, k, plot, repeats, build):
    index = SearchIndex.load(directory)
    if queries is not None:
        queries = check_queries(queries, index.dims)
    count = min(sample, len(index.ids)) if queries is None else len(queries)
    check_request(directory, target_recall, k, build, count, queries is None)
    if k + (queries is None) > len(index.ids):
        raise UserError(f"k={k} needs more than the index's {len(index.ids)} rows")
    built = read_description(directory)[2]["params"]  # the build's, which measuring does not change
    grid = settings_grid(index, k)
    twin, float32 = exact_twin(index)
    if not float32:
        logger.info("note: %s %s", directory, INT8_TRUTH)
    tuning, held_out, described = split_queries(twin, queries, sample, k)
    measurements, built_by = [], []
    logger.info("%d tuning queries, %d held out; %s", len(tuning), len(held_out), described)
    logger.info("%-72s %10s %10s", "setting", f"recall@{k}", "QPS")
    with _scratch(directory) if build else contextlib.nullcontext() as scratch:
        builds = build_grid(built, len(index.ids)) if build else [None]
        paths, loaded = {}, {0: index}  # one other build loaded at a time

        def measured_at(number, setting):
            loaded[number].set_search_params(setting)
            recalls, qps = measure(loaded[number], tuning, k, repeats)
            measured = {
                "setting": setting,
                "recall": float(np.mean(recalls)),
                "needed": needed_recall(target_recall, recalls, k),
                "qps": qps,
            }
            if builds[number] is not None:
                measured["build"] = {name: builds[number][name] for name in ("num_leaves", "dimensions_per_block")}
            measurements.append(measured)
            built_by.append(number)
            described_setting = _describe({**measured.get("build", {}), **setting})
            logger.info("%-72s %10.4f %10.1f", described_setting, measured["recall"], qps)
            return measured

        def load_build(number):
            for other in [n for n in loaded if n]:
                del loaded[other]
            if number:
                loaded[number] = _rescoring_like(SearchIndex.load(paths[number]), index, built)

        for number, overrides in enumerate(builds):
            if number:
                paths[number] = os.path.join(scratch, str(number))
                params = {name: value for name, value in built.items() if name != "rescore_factor"}
                write_search_index(
                    BuildSource(index), paths[number], "scann", {**params, **overrides, "reorder": "int8"}
                )
                load_build(number)
            plateaus = set()  # (leaves, reorder) whose last float32 rescoring pool raised no recall
            slow = []  # settings SLOWER times slower than the fastest meeting the target when measured
            last = None
            for setting in grid if not number else settings_grid(loaded[number], k):
                others = tuple(value for name, value in setting.items() if name != "rescore_factor")
                if others in plateaus:
                    continue  # a larger pool finds what a smaller found, slower
                if any(all(setting[name] >= value for name, value in s.items()) for s in slow):
                    continue  # searches at least as much as a setting too slow to be chosen
                measured = measured_at(number, setting)
                if "rescore_factor" in setting and last and last[0] == others and measured["recall"] <= last[1]:
                    plateaus.add(others)
                last = others, measured["recall"]
                fastest = _fastest(measurements, _meets)
                if fastest is not None and measured["qps"] * SLOWER < fastest["qps"]:
                    slow.append(setting)
        chosen = _fastest(measurements, _meets)
        if chosen is not None:
            number = built_by[measurements.index(chosen)]
            load_build(number)
            tried = [m["setting"] for m, n in zip(measurements, built_by) if n == number]
            _bisect(chosen["setting"], tried, _meets, lambda setting: measured_at(number, setting), k)
            chosen = _fastest(measurements, _meets)  # a bisected setting of that build, or the grid's
            loaded[number].set_search_params(chosen["setting"])
            chosen["held_out"] = float(np.mean(measure(loaded[number], held_out, k, repeats=0)[0]))
            if number and chosen["held_out"] >= target_recall:  # another build holds it: it replaces the index
                _replace_with_build(index, paths[number], directory, built)
    passed = chosen is not None and chosen["held_out"] >= target_recall
    plot = plot or os.path.join(directory, TUNE_PLOT)
    curves = {}
    for m in measurements:
        name = _describe(m["build"]) if build else index.kind
        curves.setdefault(name, []).append((m["recall"], m["qps"]))
    where = (chosen["recall"], chosen["qps"]) if passed else None
    title = f"{os.path.basename(os.path.dirname(directory.rstrip('/')))}: {index.kind}, {len(index.ids)} rows"
    plot_recall_qps(curves, plot, title, where, target_recall)
    if not passed:
        raise UserError(_refusal(measurements, chosen, target_recall, k, len(tuning), len(held_out), float32, plot))
    record = {
        **({"build": chosen["build"]} if build else {}),
        "setting": chosen["setting"],
        "recall": round(chosen["held_out"], 4),
        "tuning_recall": round(chosen["recall"], 4),
        "qps": round(chosen["qps"], 1),
        "k": k,
        "target_recall": target_recall,
        "queries": described,
        "tuning_queries": len(tuning),
        "held_out_queries": len(held_out),
        "truth": "float32" if float32 else "int8",
        "measurements": [_rounded(m) for m in measurements],
    }
    write_tuned(directory, record)
    return {**record, "plot": plot}


def _rounded(measured):
    """A measurement as `tuned.json` records it: recalls to 4 digits, QPS to 1."""
    digits = {"recall": 4, "needed": 4, "held_out": 4, "qps": 1}
    return {name: round(value, digits[name]) if name in digits else value for name, value in measured.items()}


def _replace_with_build(index, build_dir, directory, built):
    """Replaces the search index `directory` with the build in `build_dir` (atomically), giving it the index's
    float32 vectors (a hard link where the file system allows) and the float32 rescoring of `built` (the
    index's params as its `index.json` holds them) where the index had them."""
    with atomic_directory(directory, [SEARCH_INDEX_DIRECTORY]) as staging:
        shutil.copytree(build_dir, staging, dirs_exist_ok=True)
        if index.float_rows is not None:
            source = os.path.join(directory, EMBEDDINGS_NPY)
            try:
                os.link(source, staging / EMBEDDINGS_NPY)
            except OSError:
                shutil.copyfile(source, staging / EMBEDDINGS_NPY)
            _, _, config = read_description(build_dir)
            params = {**config["params"], "reorder": built["reorder"], "rescore_factor": built["rescore_factor"]}
            write_description(staging, index.ids, "scann", params, index.dims)


def _meets(measured):
    return measured["recall"] >= measured["needed"]


def _refusal(measurements, chosen, target_recall, k, tuning, held_out, float32, plot):
    """The one line of `tune`'s refusal: no setting met the target on the tuning queries, or the one chosen there
    missed it on the held-out queries."""
    nothing = f"nothing recorded (plot: {plot})"
    if chosen is not None:
        return (
            f"the fastest setting meeting recall@{k} {target_recall} on the {tuning} tuning queries "
            f"({_describe(chosen['setting'])}: {_shown(chosen['recall'], chosen['needed'])}, needed "
            f"{_shown(chosen['needed'], chosen['recall'])}) reached {_shown(chosen['held_out'], target_recall)} on "
            f"the {held_out} held out, below the target; {nothing}: another setting is not tried held out (its "
            "recall there would be biased by the choice); tune on more queries or lower --target-recall"
        )
    best = max(measurements, key=lambda m: m["recall"] - m["needed"])
    remedy = "rebuild it with `gtr-keras index` for float32 rescoring" if not float32 else "rebuild with more leaves"
    return (
        f"no setting reached recall@{k} {target_recall} on the {tuning} tuning queries with the margin for their "
        f"number (the nearest: {_shown(best['recall'], best['needed'])} with {_describe(best['setting'])}, "
        f"needed {_shown(best['needed'], best['recall'])}); {nothing}: lower --target-recall, tune on more "
        f"queries, or {remedy}"
    )


def _shown(value, other):
    """`value` to 4 digits, or more where 4 would not tell it from `other`."""
    return f"{value:.4f}" if round(value, 4) != round(other, 4) or value == other else f"{value:.6f}"


def _bisect(setting, tried, meets, measured_at, k):
    """Measures settings between `setting` (the grid's fastest meeting the target: `meets(measured)`) and the
    grid's next smaller value of each of its `BISECTED` parameters in turn, halving the gap `BISECTIONS` times:
    the smallest value that still meets it, where the grid's steps skipped it."""
    setting = dict(setting)
    for name in (name for name in BISECTED if name in setting):
        low = max((s[name] for s in tried if s[name] < setting[name]), default=None)
        if name == "reorder_factor" and low is not None and "rescore_factor" in setting:
            # A reordering pool below the rescoring pool is that pool.
            low = max(low, math.ceil(rescore_pool_size(k, setting["rescore_factor"]) / k) - 1)
        if name == "rescore_factor" and low is not None:
            low = max(low, 1)  # 1 rescores int8's own top k: the rows 0 finds
        high = setting[name]
        for _ in range(BISECTIONS if low is not None else 0):
            middle = (low + high) // 2
            if middle in (low, high):
                break
            if meets(measured_at({**setting, name: middle})):
                high = middle
            else:
                low = middle
        setting[name] = high


def _fastest(measurements, meets):
    meeting = [m for m in measurements if meets(m)]
    return max(meeting, key=lambda m: m["qps"]) if meeting else None


def _describe(setting):
    return ", ".join(f"{name}={value}" for name, value in setting.items())
