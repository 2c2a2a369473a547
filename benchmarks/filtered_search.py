"""Filtered search at every selectivity: recall@10 against exact filtered search, and QPS, on synthetic vectors.

Writes (or reuses) `large_index.py`'s synthetic corpus (`add_corpus_arguments`, `write_embedding_files`) and its ScaNN
index in `--work`, gives every document a synthetic metadata field `bucket` (an integer drawn uniformly from
0-9,999, independent of the vectors), and for each selectivity (`bucket < T`: 50%, 30%, 20%, 15%, 10%, 1%,
0.1%, 0.01%) measures, on `--num-queries` queries in one batched call each:

- the planner (`filters.filtered_search`), and each of its two plans forced: ScaNN with widening over-fetch,
  and exact scoring of the allowed rows on ScaNN's int8 vectors, both with the best candidates rescored on
  float32 (the index's default);
- the planner as it searched before float32 rescoring (the same index, its float32 rows left unread: int8
  scores only), for the recall beside;
- unfiltered ScaNN search (`SearchIndex.search`), for the QPS beside;
- recall@10 of each against exact filtered search (float32 brute force over the allowed rows).

The exact plan's QPS falls as the allowed rows grow and ScaNN's rises: the planner's `EXACT_FRACTION` is set
from where they cross. Results are printed and appended to the "## Filtered search" section of
`benchmarks/RESULTS.md` with `lscpu`'s flags.

Usage:
    PYTHONPATH=. flock /work/notes/bench.lock python benchmarks/filtered_search.py --n 1000000 --work /tmp/filtered-1m
"""

import argparse
import datetime
import json
import os
import sys
import time

import numpy as np
from large_index import add_corpus_arguments, build, write_embedding_files
from results import RESULTS, lscpu_flags, machine, publish, rerun_command

K = 10
SECTION = "## Filtered search"
BUCKETS = 10_000
THRESHOLDS = (5000, 3000, 2000, 1500, 1000, 100, 10, 1)  # bucket < T: 50%, 30%, 20%, 15%, 10%, 1%, 0.1%, 0.01%


def embedding_paths(embeddings_dir):
    return sorted(os.path.join(embeddings_dir, name) for name in os.listdir(embeddings_dir) if name.endswith(".npy"))


def exact_filtered(embeddings_dir, queries, masks):
    """Per mask, the exact top-K rows of the allowed rows (float32 dot products), scoring each embedding file once."""
    best = [(np.full((len(queries), K), -np.inf, np.float32), np.zeros((len(queries), K), np.int64)) for _ in masks]
    first = 0
    for path in embedding_paths(embeddings_dir):
        chunk = np.load(path, mmap_mode="r")
        for start in range(0, len(chunk), 65536):
            block = np.asarray(chunk[start : start + 65536], np.float32)
            scores = queries @ block.T
            rows = np.arange(first + start, first + start + len(block))
            for number, mask in enumerate(masks):
                allowed = mask[rows]
                if not allowed.any():
                    continue
                part_scores, part_rows = scores[:, allowed], rows[allowed]
                width = min(K, part_scores.shape[1])
                top = np.argpartition(-part_scores, width - 1, axis=1)[:, :width]
                merged_scores = np.concatenate([best[number][0], np.take_along_axis(part_scores, top, 1)], axis=1)
                merged_rows = np.concatenate([best[number][1], part_rows[top]], axis=1)
                order = np.argsort(-merged_scores, axis=1, kind="stable")[:, :K]
                best[number] = (np.take_along_axis(merged_scores, order, 1), np.take_along_axis(merged_rows, order, 1))
        first += len(chunk)
    return [rows for _, rows in best]


def recall(found, exact, mask):
    wanted = min(K, int(mask.sum()))
    return float(np.mean([len(set(f.tolist()) & set(e[:wanted].tolist())) / wanted for f, e in zip(found, exact)]))


def timed(function, repeats):
    function()  # warm-up: the first exact call maps the int8 vectors
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - start)
    return result, float(np.median(seconds))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_corpus_arguments(parser)
    parser.add_argument("--work", required=True, help="directory for embedding files and the index (kept for reruns)")
    parser.add_argument("--repeats", type=int, default=3, help="timed batched calls of each search (median)")
    parser.add_argument(
        "--scann-min-selectivity",
        type=float,
        default=0.001,
        help="the ScaNN plan is forced only at this selectivity or more (below, its over-fetch of k / selectivity "
        "results takes minutes a batch)",
    )
    parser.add_argument("--results", default=RESULTS, help="markdown file to append to")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args(argv)

    from gtr_keras import Filter
    from gtr_keras.filters import filtered_search as planner
    from gtr_keras.filters.metadata_columns import MetadataColumns
    from gtr_keras.storage.search_index import SearchIndex

    started = datetime.datetime.now(datetime.UTC)
    embeddings_dir, index_dir = os.path.join(args.work, "embeddings"), os.path.join(args.work, "index")
    write_embedding_files(args, embeddings_dir)
    build_s = None
    if not os.path.exists(os.path.join(index_dir, "retriever.json")):
        build_s = build(embeddings_dir, index_dir, exact=False)["build_s"]
    queries = np.load(os.path.join(args.work, "queries.npy"))
    index = SearchIndex.load(os.path.join(index_dir, "index"))
    if index.float_rows is None:
        sys.exit(f"{index_dir} was built before float32 rescoring: remove it, and this script builds it again")
    int8_only = SearchIndex.load(os.path.join(index_dir, "index"))
    int8_only.float_rows = int8_only.embeddings = None  # searched as before float32 rescoring: int8 scores
    rng = np.random.default_rng([args.seed, 44])
    buckets = rng.integers(0, BUCKETS, len(index.ids))
    start = time.perf_counter()
    columns = MetadataColumns(index.ids, [{"bucket": int(b)} for b in buckets])
    columns_s = time.perf_counter() - start
    filters = [Filter(f"bucket < {threshold}") for threshold in THRESHOLDS]
    masks, mask_s = [], []
    for filter in filters:
        start = time.perf_counter()
        masks.append(columns.allowed(filter))
        mask_s.append(time.perf_counter() - start)
    exact = exact_filtered(embeddings_dir, queries, masks)
    _, unfiltered_s = timed(lambda: index.search(queries, K), args.repeats)
    unfiltered_qps = len(queries) / unfiltered_s
    plans = {
        "planner": (planner.EXACT_ROWS, planner.EXACT_FRACTION),
        "scann": (0, 0.0),
        "exact": (len(index.ids), 1.0),
    }
    rows = []
    for filter, mask, exact_rows, seconds in zip(filters, masks, exact, mask_s):
        if not mask.any():  # a small --n: no row allowed
            continue
        row = {"filter": filter.clauses[0].text, "selectivity": float(mask.mean()), "allowed": int(mask.sum())}
        for name, (exact_rows_setting, fraction) in plans.items():
            if name == "scann" and row["selectivity"] < args.scann_min_selectivity:
                row["scann_recall"] = row["scann_qps"] = None
                continue
            planner.EXACT_ROWS, planner.EXACT_FRACTION = exact_rows_setting, fraction
            (found, _), search_s = timed(lambda: planner.filtered_search(index, queries, K, mask), args.repeats)
            row[f"{name}_recall"], row[f"{name}_qps"] = recall(found, exact_rows, mask), len(queries) / search_s
        planner.EXACT_ROWS, planner.EXACT_FRACTION = plans["planner"]
        (found, _), search_s = timed(lambda: planner.filtered_search(int8_only, queries, K, mask), args.repeats)
        row["int8_recall"], row["int8_qps"] = recall(found, exact_rows, mask), len(queries) / search_s
        row["plan"] = "exact" if planner.plans_exact(row["allowed"], len(index.ids)) else "scann"
        row["mask_ms"] = 1000 * seconds
        rows.append(row)
        print(json.dumps(row), flush=True)

    table = [
        "| filter | selectivity | allowed rows | plan | recall@10 | QPS | int8 only (before) recall / QPS | "
        "ScaNN plan recall / QPS | exact plan recall / QPS | unfiltered QPS | mask |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        scann = "not run" if row["scann_qps"] is None else f"{row['scann_recall']:.4f} / {row['scann_qps']:,.0f}"
        table.append(
            f"| `{row['filter']}` | {100 * row['selectivity']:.3g}% | {row['allowed']:,} | {row['plan']} | "
            f"{row['planner_recall']:.4f} | {row['planner_qps']:,.0f} | "
            f"{row['int8_recall']:.4f} / {row['int8_qps']:,.0f} | {scann} | "
            f"{row['exact_recall']:.4f} / {row['exact_qps']:,.0f} | "
            f"{unfiltered_qps:,.0f} | {row['mask_ms']:.1f} ms |"
        )
    table = "\n".join(table)
    block = f"""### {started:%Y-%m-%d %H:%M} UTC: {len(index.ids):,} x {index.dims} synthetic vectors, filtered

Command: `{rerun_command(__file__, argv)}`

- Machine: {machine()}; 1-min load average {os.getloadavg()[0]:.2f} after. `lscpu` flags: {lscpu_flags()}
- Data: `large_index.py`'s synthetic corpus ({args.clusters} centres, noise norm {args.noise}), {len(queries)}
  queries; metadata `bucket`, uniform over 0-{BUCKETS - 1} and independent of the vectors. Index: ScaNN,
  `{json.dumps(index.params)}`{f", built in {build_s / 60:.1f} min" if build_s else " (reused)"}.
- Each search: one batched call of every query, median of {args.repeats} (after one warm-up). Recall@10
  against exact filtered search (float32 dot products over the allowed rows); "int8 only (before)" is the
  planner on the same index with its float32 rows left unread, as it searched before float32 rescoring.
  The planner's settings:
  exact below {planner.EXACT_FRACTION:.1%} of a part's rows or {planner.EXACT_ROWS:,} rows. MetadataColumns of
  the {len(index.ids):,} documents built in {columns_s:.1f} s; "mask" is `MetadataColumns.allowed` of the filter.

{table}
"""
    publish(block, args.results, SECTION, record_it=not args.no_record)


if __name__ == "__main__":
    sys.exit(main())
