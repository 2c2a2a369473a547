"""`tune`: the recall@k and QPS of an index's search settings against exact float32 search, measured on queries
held out from those it chose on, and the fastest setting that meets a target recall, recorded in the index
(`layout.write_tuned`).

A ScaNN index is measured over a grid of leaves searched (fractions of its leaves), reordering pools
(`reorder_factor`, AH candidates reordered on int8 a result) and float32 rescoring pools (`rescore_factor`,
int8-reordered candidates rescored with float32 a result; for each leaves and reordering pool, the next larger
rescoring pool only while the last one raised recall); an int8 or binary exact index over its `rescore`
pools; then the parameters of the fastest setting that meets the target are bisected towards the grid's next
smaller value (`BISECTED`), where the grid's steps may have skipped a cheaper setting that meets it.

The truth is exact search of the index's float32 vectors: what a user's recall is counted against. A ScaNN
index built before float32 rescoring keeps none (only ScaNN's int8 copy): its truth is that copy, decoded, and
`tune` says so, since its recall against float32 search stops below what is measured.

The queries are held-out vectors (`queries`, real queries where there are some) or a sample of the index's own
rows, each left out of its own answer (document rows: nearer their neighbours than a real query is). They are
split in two halves of one distribution: settings are measured and chosen on the tuning half, where a setting
must reach the target plus a margin for the half's size (`needed_recall`), and the fastest of those whose
recall on the held-out half meets the target is recorded, with both recalls. QPS is that of one batched
`search` of the tuning half at `k`, the best of `repeats` runs.
"""

import contextlib
import math
import os
import shutil
import tempfile
import time

import numpy as np

from gtr_keras.errors import UserError
from gtr_keras.index.layout import (
    EMBEDDINGS_NPY,
    INDEX_SUBDIR,
    RETRIEVER_JSON,
    SCANN_DIR,
    SCANN_INT8_DATASET,
    SCANN_INT8_MULTIPLIERS,
    SEARCH_INDEX_DIRECTORY,
    TUNE_PLOT,
    TUNE_SCRATCH_PREFIX,
    read_description,
    search_settings,
    write_description,
    write_tuned,
)
from gtr_keras.index.quantized_vectors import FloatVectors
from gtr_keras.index.search_index import SearchIndex, write_search_index
from gtr_keras.index.segmented_index import SegmentedIndex
from gtr_keras.tuning.recall_curve import plot_recall_qps
from gtr_keras.utils import files
from gtr_keras.utils.file_operations import crashed
from gtr_keras.utils.files import atomic_directory
from gtr_keras.utils.locks import output_lock
from gtr_keras.utils.records import check_positive_int

# The grid: leaves searched as fractions of a ScaNN index's leaves, its reordering pools (results times
# these), its float32 rescoring pools (results times these, at most the reordering pool), and a quantized
# exact index's rescored candidates (k times these).
LEAF_FRACTIONS = (0.005, 0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.25)
REORDER_FACTORS = (5, 10, 20, 30, 50, 70, 100, 150, 200)
RESCORE_FACTORS = (1, 2, 3, 5, 10)
RESCORE_MULTIPLES = (1, 2, 4, 10, 20, 50)
# After the grid, the chosen setting's parameters are bisected towards the grid's next smaller value, in this
# order, this many times each.
BISECTED = ("reorder_factor", "rescore_factor", "num_leaves_to_search", "rescore")
BISECTIONS = 3
# With `build=True`, ScaNN builds of these multiples of the index's leaves and these AH block widths too.
BUILD_LEAF_SCALES = (0.5, 1.0, 2.0)
BUILD_DIMENSIONS_PER_BLOCK = (2, 4)
# A setting is tried on the held-out queries when its recall on the tuning queries is at least the target
# plus this many standard errors of their mean (one-sided 95%): `needed_recall`.
MARGIN_Z = 1.645
_CHUNK_ROWS = 65_536
INT8_TRUTH = (
    "keeps no float32 vectors (built before float32 rescoring, only ScaNN's int8 copy): recall is measured "
    "against exact search of that copy, and recall against float32 search stops below it (0.93-0.97 in the "
    "project's runs; not measurable without the float32 vectors); rebuild it with `gtr-keras index` for float32 "
    "rescoring"
)


class DecodedRows:
    """The int8 rows of a ScaNN searcher decoded to float32 (`int8 / multiplier`, per dimension), a slice at a
    time: what ScaNN reorders with, and the truth of an index that keeps no float32 vectors."""

    def __init__(self, scann_dir):
        self.codes = np.load(os.path.join(scann_dir, SCANN_INT8_DATASET), mmap_mode="r")
        self.multipliers = np.load(os.path.join(scann_dir, SCANN_INT8_MULTIPLIERS))
        self.shape = self.codes.shape

    def __getitem__(self, rows):
        return np.asarray(self.codes[rows], dtype=np.float32) / self.multipliers


class BuildSource:
    """A ScaNN index's vectors as a `write_search_index` source (`ids`, `dims`, `num_rows`, `chunks()`), what a
    build of other leaves or blocks is trained on: its float32 vectors, or its decoded int8 copy without them."""

    def __init__(self, index):
        self.ids = list(index.ids)
        self.rows = _read_in_order(index)
        if self.rows is None:
            self.rows = DecodedRows(os.path.join(index.path, SCANN_DIR))
        self.num_rows, self.dims = self.rows.shape

    def chunks(self):
        for start in range(0, self.num_rows, _CHUNK_ROWS):
            yield np.asarray(self.rows[start : start + _CHUNK_ROWS], dtype=np.float32)


def _read_in_order(index):
    """The float32 vectors of one loaded index to read through, block by block: its `embeddings.npy` mapped
    anew (a search's map reads at random, without read-ahead), or the array it holds; None without them."""
    if index.embeddings is None or index.path is None:
        return index.embeddings
    return np.load(os.path.join(index.path, EMBEDDINGS_NPY), mmap_mode="r")


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
        factors = sorted(set(REORDER_FACTORS) | {params["reorder_factor"]})
        rescores = sorted(set(RESCORE_FACTORS) | {params["rescore_factor"]}) if "rescore_factor" in names else [None]
        return [
            {"num_leaves_to_search": s, "reorder_factor": r, **({"rescore_factor": f} if f else {})}
            for s in sorted(searched)
            for r in factors
            for f in rescores
            if f is None or f <= r  # a larger rescoring pool than the reordering pool is that pool
        ]
    return [{"rescore": r} for r in sorted({k * m for m in RESCORE_MULTIPLES} | {params["rescore"]})]


def exact_twin(index):
    """`(twin, float32)`: an exact index over the float32 vectors of `index` (where a ScaNN part keeps none, its
    int8 copy decoded; `float32` is then False), its rows numbered as `index`'s."""
    twins, float32 = [], True
    for part, deleted in index.parts:
        floats = _read_in_order(part)
        if floats is None:
            floats, float32 = DecodedRows(os.path.join(part.path, SCANN_DIR)), False
        twins.append((SearchIndex.from_vectors(part.ids, FloatVectors(floats)), deleted))
    return (twins[0][0] if not isinstance(index, SegmentedIndex) else SegmentedIndex(twins, index.names)), float32


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
    others = rows != own[:, None]
    others[others.sum(axis=1) > k, -1] = False  # own row absent: the last one is the (k + 1)-th
    return rows[others].reshape(len(rows), k)


def per_query_recall(found, truth):
    """Each query's fraction of its true top `k` (`truth`, `[n, k]` rows) among its `found` rows (distinct)."""
    found, truth = np.asarray(found), np.asarray(truth)
    return (found[:, :, None] == truth[:, None, :]).any(axis=1).sum(axis=1) / truth.shape[1]


def recall_at_k(found, truth):
    """The mean fraction of each query's true top `k` (`truth`, `[n, k]` rows) among its `found` rows."""
    return float(np.mean(per_query_recall(found, truth)))


def needed_recall(target, recalls, k):
    """The recall on the tuning queries (their per-query `recalls`) a setting needs to be tried held out: the
    target plus `MARGIN_Z` standard errors of their mean, the per-query variance taken as at least that of `k`
    independent neighbours found each with probability `target`, so that a sample too small to tell is refused.

    Example:
    >>> round(needed_recall(0.97, np.ones(100), 10), 4)
    0.9789
    """
    variance = max(float(np.var(recalls, ddof=1)) if len(recalls) > 1 else 0.0, target * (1 - target) / k)
    return target + MARGIN_Z * math.sqrt(variance / len(recalls))


class QuerySet:
    """Queries and their exact answers: `vectors`, `own` (each one's own row of the index, or None) and
    `truth` (`[n, k]` rows of the exact top `k`, own rows left out)."""

    def __init__(self, twin, vectors, own, k):
        self.vectors, self.own = vectors, own
        self.truth = _best_others(twin.search(vectors, k + (own is not None))[0], own, k)

    def __len__(self):
        return len(self.vectors)

    def found(self, index, k):
        return _best_others(index.search(self.vectors, k + (self.own is not None))[0], self.own, k)


def split_queries(twin, queries, sample, k):
    """`(tuning, held_out, description)`: two `QuerySet`s of one distribution, from held-out `queries` (float32
    `[n, D]`, shuffled with seed 0, then halved) or, without, from `sample` of `twin`'s rows (seed 0)."""
    rng = np.random.default_rng(0)
    if queries is None:
        picked = rng.choice(len(twin.ids), min(sample, len(twin.ids)), replace=False)
        halves = [np.sort(picked[: len(picked) - len(picked) // 2]), np.sort(picked[len(picked) - len(picked) // 2 :])]
        sets = [QuerySet(twin, _sampled_rows(twin, half), half, k) if len(half) else None for half in halves]
        described = (
            f"{len(picked)} of the index's rows as queries, sampled (seed 0): document rows, each left out of its "
            "own answer, not real queries"
        )
    else:
        order = rng.permutation(len(queries))
        cut = len(queries) - len(queries) // 2
        sets = [
            QuerySet(twin, queries[np.sort(half)], None, k) if len(half) else None for half in np.split(order, [cut])
        ]
        described = f"{len(queries)} held-out query vectors"
    if sets[1] is None:
        raise UserError(
            f"tune needs at least 2 queries (half to tune on, half to check on), got {len(sets[0])}: "
            "raise --sample or give more --queries"
        )
    return sets[0], sets[1], described


def measure(index, queries, k, repeats=2):
    """`(per-query recall@k, QPS)` of `index`'s current setting on a `QuerySet` (QPS None for `repeats=0`)."""
    recalls = per_query_recall(queries.found(index, k), queries.truth)
    elapsed = []
    for _ in range(repeats):
        start = time.perf_counter()
        index.search(queries.vectors, k)
        elapsed.append(time.perf_counter() - start)
    return recalls, len(queries) / max(min(elapsed), 1e-9) if elapsed else None


def _lock_of(directory):
    """`(output, inside)` locked while an index is tuned: the index directory holding the search index
    `directory` (as `gtr-keras tune --index` and the writers of the index lock it), else `directory`."""
    parent = os.path.dirname(directory.rstrip("/"))
    if os.path.basename(directory.rstrip("/")) == INDEX_SUBDIR and files.isfile(os.path.join(parent, RETRIEVER_JSON)):
        return parent, (INDEX_SUBDIR,)
    return directory, ()


def scratch_prefix(directory):
    """The names of `tune --build`'s scratch beside the search index `directory`: in an index directory every
    `.tune-*` (it holds one search index), else `.tune-NAME-*`."""
    parent, name = files.parent_and_name(directory)
    in_index_directory = name == INDEX_SUBDIR and files.isfile(os.path.join(parent, RETRIEVER_JSON))
    return parent, TUNE_SCRATCH_PREFIX if in_index_directory else f"{TUNE_SCRATCH_PREFIX}{name}-"


def remove_scratch(directory):
    """Removes the scratch that killed `tune --build` runs of the search index `directory` left beside it;
    returns the paths removed. Only under the index's lock (`tune` holds it): no other run is using them."""
    parent, prefix = scratch_prefix(directory)
    stale = [os.path.join(parent, name) for name in files.listdir(parent) if name.startswith(prefix)]
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


def _rescoring_like(build, index):
    """`build` (a ScaNN index over `index`'s rows in their order, written without float32) rescoring with
    `index`'s float32 rows, as it will once it replaces `index`: the builds `tune --build` measures share them."""
    if index.float_rows is not None:
        build.float_rows, build.embeddings = index.float_rows, index.embeddings
        build.params.update(reorder=index.params["reorder"], rescore_factor=index.params["rescore_factor"])
    return build


def tune(directory, queries=None, sample=1000, target_recall=0.95, k=10, plot=None, repeats=2, build=False, log=print):
    """Measures the search settings of the index in `directory` (the grid, then bisections between the
    fastest setting that meets `target_recall` and the grid's next smaller values) on half the queries,
    records the fastest that meets `target_recall` on the other half in it (`tuned.json`, which
    `SearchIndex.load` applies) and draws the recall-QPS curve.

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
        log: called with each line of the table.

    Returns:
        The record written to `tuned.json`: `setting`, `recall` (on the held-out half), `tuning_recall`,
        `qps`, `k`, `target_recall`, `queries` (what they are), `tuning_queries` and `held_out_queries`
        (how many), `truth` (`"float32"`, or `"int8"` for an index without float32 vectors),
        `measurements` (every setting's `recall` and `needed` on the tuning half, `qps`, and `held_out`
        where it was checked), and `plot`, the PNG's path.

    Raises:
        UserError: an index with nothing to tune (exact float32), `build` for another than a ScaNN index of
            one segment, queries of other dims, fewer than 2 queries, or no setting that meets the target on
            the held-out half (nothing is recorded or rebuilt then; the plot is still drawn).

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
        return _tune(directory, queries, sample, target_recall, k, plot, repeats, build, log)


def _tune(directory, queries, sample, target_recall, k, plot, repeats, build, log):
    index = SearchIndex.load(directory)
    grid = settings_grid(index, k)
    twin, float32 = exact_twin(index)
    if not float32:
        log(f"note: {directory} {INT8_TRUTH}")
    if queries is not None:
        queries = np.asarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != index.dims:
            raise UserError(f"queries of shape {queries.shape}, the index has {index.dims} dims")
    if k + (queries is None) > len(index.ids):
        raise UserError(f"k={k} needs more than the index's {len(index.ids)} rows")
    tuning, held_out, described = split_queries(twin, queries, sample, k)
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
    log(f"{len(tuning)} tuning queries, {len(held_out)} held out; {described}")
    log(f"{'setting':<72} {'recall@' + str(k):>10} {'QPS':>10}")
    with _scratch(directory) if build else contextlib.nullcontext() as scratch:
        builds = build_grid(index.params, len(index.ids)) if build else [None]
        paths, loaded = {}, {0: index}  # one other build loaded at a time

        def measured_at(number, setting):
            loaded[number].set_search_params(setting)
            recalls, qps = measure(loaded[number], tuning, k, repeats)
            recall = float(np.mean(recalls))
            measured = {
                "setting": setting,
                "recall": round(recall, 4),
                "needed": round(needed_recall(target_recall, recalls, k), 4),
                "qps": round(qps, 1),
            }
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
                loaded[number] = _rescoring_like(SearchIndex.load(paths[number]), index)

        for number, overrides in enumerate(builds):
            if number:
                paths[number] = os.path.join(scratch, str(number))
                params = {name: value for name, value in index.params.items() if name != "rescore_factor"}
                write_search_index(
                    BuildSource(index), paths[number], "scann", {**params, **overrides, "reorder": "int8"}
                )
                load_build(number)
            plateaus = set()  # (leaves, reorder) whose last float32 rescoring pool raised no recall
            last = None
            for setting in grid if not number else settings_grid(loaded[number], k):
                others = tuple(value for name, value in setting.items() if name != "rescore_factor")
                if others in plateaus:
                    continue  # a larger pool finds what a smaller found, slower
                measured = measured_at(number, setting)
                if "rescore_factor" in setting and last and last[0] == others and measured["recall"] <= last[1]:
                    plateaus.add(others)
                last = others, measured["recall"]
        chosen = _fastest(measurements, _meets)
        if chosen is not None:
            number = built_by[measurements.index(chosen)]
            load_build(number)
            tried = [m["setting"] for m, n in zip(measurements, built_by) if n == number]
            _bisect(chosen["setting"], tried, _meets, lambda setting: measured_at(number, setting))
        chosen = None
        for candidate in sorted((m for m in measurements if _meets(m)), key=lambda m: -m["qps"]):
            number = built_by[measurements.index(candidate)]
            if number not in loaded:
                load_build(number)
            loaded[number].set_search_params(candidate["setting"])
            candidate["held_out"] = round(float(np.mean(measure(loaded[number], held_out, k, repeats=0)[0])), 4)
            if candidate["held_out"] >= target_recall:
                chosen = candidate
                break
        number = built_by[measurements.index(chosen)] if chosen is not None else 0
        if number:  # another build holds the fastest setting: it replaces the index
            _replace_with_build(index, paths[number], directory)
    plot = plot or os.path.join(directory, TUNE_PLOT)
    curves = {}
    for m in measurements:
        name = _describe(m["build"]) if build else index.kind
        curves.setdefault(name, []).append((m["recall"], m["qps"]))
    where = chosen and (chosen["recall"], chosen["qps"])
    title = f"{os.path.basename(os.path.dirname(directory.rstrip('/')))}: {index.kind}, {len(index.ids)} rows"
    plot_recall_qps(curves, plot, title, where, target_recall)
    if chosen is None:
        raise UserError(_refusal(measurements, target_recall, k, len(tuning), len(held_out), float32, plot))
    record = {
        **({"build": chosen["build"]} if build else {}),
        "setting": chosen["setting"],
        "recall": chosen["held_out"],
        "tuning_recall": chosen["recall"],
        "qps": chosen["qps"],
        "k": k,
        "target_recall": target_recall,
        "queries": described,
        "tuning_queries": len(tuning),
        "held_out_queries": len(held_out),
        "truth": "float32" if float32 else "int8",
        "measurements": measurements,
    }
    write_tuned(directory, record)
    return {**record, "plot": plot}


def _replace_with_build(index, build_dir, directory):
    """Replaces the search index `directory` with the build in `build_dir` (atomically), giving it the index's
    float32 vectors (a hard link where the file system allows) and float32 rescoring where the index had them."""
    with atomic_directory(directory, [SEARCH_INDEX_DIRECTORY]) as staging:
        shutil.copytree(build_dir, staging, dirs_exist_ok=True)
        if index.float_rows is not None:
            source = os.path.join(directory, EMBEDDINGS_NPY)
            try:
                os.link(source, staging / EMBEDDINGS_NPY)
            except OSError:
                shutil.copyfile(source, staging / EMBEDDINGS_NPY)
            _, _, config = read_description(build_dir)
            params = {
                **config["params"],
                "reorder": index.params["reorder"],
                "rescore_factor": index.params["rescore_factor"],
            }
            write_description(staging, index.ids, "scann", params, index.dims)


def _meets(measured):
    return measured["recall"] >= measured["needed"]


def _refusal(measurements, target_recall, k, tuning, held_out, float32, plot):
    """The one line of `tune`'s refusal when no setting meets the target on the held-out queries."""
    best = max(measurements, key=lambda m: m["recall"])
    reached = f"the best: {best['recall']} on the {tuning} tuning queries with {_describe(best['setting'])}"
    checked = [m for m in measurements if "held_out" in m]
    if checked:
        held = max(checked, key=lambda m: m["held_out"])
        reached += f", {held['held_out']} on the {held_out} held out with {_describe(held['setting'])}"
    remedy = "rebuild it with `gtr-keras index` for float32 rescoring" if not float32 else "rebuild with more leaves"
    return (
        f"no setting reached recall@{k} {target_recall} on held-out queries ({reached}; to be checked held out a "
        f"setting needs {best['needed']} on the tuning queries, a margin for their number); nothing recorded "
        f"(plot: {plot}): lower --target-recall, tune on more queries, or {remedy}"
    )


def _bisect(setting, tried, meets, measured_at):
    """Measures settings between `setting` (the grid's fastest meeting the target: `meets(measured)`) and the
    grid's next smaller value of each of its `BISECTED` parameters in turn, halving the gap `BISECTIONS` times:
    the smallest value that still meets it, where the grid's steps skipped it."""
    setting = dict(setting)
    for name in (name for name in BISECTED if name in setting):
        low = max((s[name] for s in tried if s[name] < setting[name]), default=None)
        if name == "reorder_factor" and low is not None and "rescore_factor" in setting:
            low = max(low, setting["rescore_factor"] - 1)  # a reordering pool below the rescoring pool is that pool
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
