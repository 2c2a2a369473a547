"""`tune` checked at scale: the recall it reports for the setting it records, against an exact search of our own.

Runs `gtr_keras.tuning.tuner.tune` on a ScaNN index (sampled rows as queries, or `--queries`), then loads the
index as a searcher does (the recorded setting applies) and scores its answers with an exact search written
here (numpy, a block of rows at a time, over the index's float32 vectors, `embeddings.npy`): on the sampled
rows `tune` held out (each one's own row left out), and on `--check-queries`, query vectors `tune` never saw.
The table gives the recall `tune` reported on its tuning half and its held-out half, ours on the held-out half
and on the other queries, and the QPS, so that the recalls can be compared.

Usage:
    PYTHONPATH=. python benchmarks/tune_check.py --index /tmp/frontier-1m/index-scann --sample 1000 \
        --target-recall 0.99 --check-queries /tmp/frontier-1m/queries.npy
"""

import argparse
import os
import time

import numpy as np
from results import RESULTS, lscpu_flags, machine, publish, rerun_command

SECTION = "## Speed-memory frontier"
K = 10


def exact_top(vectors, queries, own=None, block=65_536):
    """The exact top `K` rows of float32 `vectors` for each query by dot product (`own[i]`, query `i`'s own
    row, left out), a block of rows at a time."""
    best_scores = np.full((len(queries), K), -np.inf, np.float32)
    best_rows = np.zeros((len(queries), K), np.int64)
    for start in range(0, len(vectors), block):
        scores = queries @ np.asarray(vectors[start : start + block], np.float32).T
        if own is not None:
            mine = (own >= start) & (own < start + scores.shape[1])
            scores[np.flatnonzero(mine), own[mine] - start] = -np.inf
        top = np.argpartition(-scores, K, axis=1)[:, :K]
        merged_scores = np.concatenate([best_scores, np.take_along_axis(scores, top, 1)], axis=1)
        merged_rows = np.concatenate([best_rows, top + start], axis=1)
        order = np.argsort(-merged_scores, axis=1, kind="stable")[:, :K]
        best_scores, best_rows = np.take_along_axis(merged_scores, order, 1), np.take_along_axis(merged_rows, order, 1)
    return best_rows


def recall(found, truth, own=None):
    found = found if own is None else [row[row != me][:K] for row, me in zip(found, own)]
    return float(np.mean([len(set(f[:K]) & set(t)) / K for f, t in zip(found, truth)]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", required=True, help="a ScaNN index directory with float32 vectors")
    parser.add_argument("--sample", type=int, default=1000)
    parser.add_argument("--queries", help="held-out query vectors (.npy) tune tunes on, instead of --sample")
    parser.add_argument("--check-queries", help="query vectors (.npy) tune never sees, checked after it")
    parser.add_argument("--target-recall", type=float, default=0.95)
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    from gtr_keras.storage.layout import EMBEDDINGS_NPY, read_description
    from gtr_keras.storage.search_index import SearchIndex
    from gtr_keras.tuning.tuner import tune

    directory = read_description(args.index)[0]
    vectors = np.load(os.path.join(directory, EMBEDDINGS_NPY), mmap_mode="r")
    tune_queries = np.load(args.queries) if args.queries else None
    start = time.perf_counter()
    record = tune(args.index, tune_queries, sample=args.sample, target_recall=args.target_recall, k=K)
    tune_s = time.perf_counter() - start
    index = SearchIndex.load(args.index)
    if tune_queries is None:  # the rows tune held out: the second half of its sample (`tuner.split_queries`)
        picked = np.random.default_rng(0).choice(len(index.ids), min(args.sample, len(index.ids)), replace=False)
        own = np.sort(picked[len(picked) - len(picked) // 2 :])
        held_out = np.asarray(vectors[own], np.float32)
    else:
        order = np.random.default_rng(0).permutation(len(tune_queries))
        own, held_out = None, tune_queries[np.sort(order[len(order) - len(order) // 2 :])]
    ours = recall(index.search(held_out, K + (own is not None))[0], exact_top(vectors, held_out, own), own)
    checked = "-"
    if args.check_queries:
        others = np.load(args.check_queries)
        checked = f"{recall(index.search(others, K)[0], exact_top(vectors, others)):.4f} ({len(others)} queries)"
    setting = ", ".join(f"{k}={v}" for k, v in record["setting"].items())
    flags = lscpu_flags()
    block = "\n".join(
        [
            f"### tune checked on {len(index.ids):,} x {index.dims} (ScaNN, {index.params['num_leaves']} leaves)",
            "",
            f"Command: `{rerun_command(__file__, argv)}`. Machine: {machine()}; load average before the run "
            f"{', '.join(f'{load:.1f}' for load in load_before)}; lscpu flags: {flags}",
            f"Queries: {record['queries']}; truth: exact search of the index's {record['truth']} vectors.",
            "",
            "| rows | target | settings measured | chosen | recall@10 tune reported: tuning half / held out | "
            "ours, held out (float32) | ours, other queries (float32) | QPS | tune took |",
            "|---|---|---|---|---|---|---|---|---|",
            f"| {len(index.ids):,} | {args.target_recall} | {len(record['measurements'])} | {setting} | "
            f"{record['tuning_recall']:.4f} / {record['recall']:.4f} | {ours:.4f} | {checked} | "
            f"{record['qps']:,.0f} | {tune_s / 60:.1f} min |",
            "",
            f"Plot: `{record['plot']}`.",
        ]
    )
    publish(block, args.results, SECTION, not args.no_record)


if __name__ == "__main__":
    main()
