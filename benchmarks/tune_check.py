"""`tune` checked at scale: the recall it reports for the setting it records, against an exact search of our own.

Runs `gtr_keras.tuning.tuner.tune` on a ScaNN index (sampled rows as queries), then loads the index as a
searcher does (the recorded setting applies), searches the same sampled rows, and scores the answers with
an exact search written here (numpy, a block of rows at a time, over the index's int8 vectors decoded:
what `tune` calls the index's own vectors), each query's own row left out. The table gives the recall `tune`
reported, ours, and the QPS, so that the two recalls can be compared.

Usage:
    PYTHONPATH=. python benchmarks/tune_check.py --index /tmp/frontier-1m/scann --sample 1000 --target-recall 0.95
"""

import argparse
import os
import time

import numpy as np
from results import RESULTS, lscpu_flags, machine, publish, rerun_command

SECTION = "## Speed-memory frontier"
K = 10


def exact_others(index_dir, sampled, block=65_536):
    """The exact top `K` rows of the decoded int8 vectors for each sampled row, that row left out."""
    codes = np.load(os.path.join(index_dir, "scann", "int8_dataset.npy"), mmap_mode="r")
    multipliers = np.load(os.path.join(index_dir, "scann", "int8_multipliers.npy"))
    queries = np.asarray(codes[sampled], np.float32) / multipliers
    best_scores = np.full((len(queries), K), -np.inf, np.float32)
    best_rows = np.zeros((len(queries), K), np.int64)
    for start in range(0, len(codes), block):
        scores = queries @ (np.asarray(codes[start : start + block], np.float32) / multipliers).T
        own = (sampled >= start) & (sampled < start + scores.shape[1])
        scores[np.flatnonzero(own), sampled[own] - start] = -np.inf
        top = np.argpartition(-scores, K, axis=1)[:, :K]
        merged_scores = np.concatenate([best_scores, np.take_along_axis(scores, top, 1)], axis=1)
        merged_rows = np.concatenate([best_rows, top + start], axis=1)
        order = np.argsort(-merged_scores, axis=1, kind="stable")[:, :K]
        best_scores, best_rows = np.take_along_axis(merged_scores, order, 1), np.take_along_axis(merged_rows, order, 1)
    return queries, best_rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", required=True, help="a ScaNN search index directory")
    parser.add_argument("--sample", type=int, default=1000)
    parser.add_argument("--target-recall", type=float, default=0.95)
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    from gtr_keras.index import SearchIndex, read_description
    from gtr_keras.tuning import tune

    directory = read_description(args.index)[0]

    start = time.perf_counter()
    record = tune(args.index, sample=args.sample, target_recall=args.target_recall, k=K)
    tune_s = time.perf_counter() - start
    index = SearchIndex.load(args.index)
    sampled = np.sort(np.random.default_rng(0).choice(len(index.ids), args.sample, replace=False))
    queries, truth = exact_others(directory, sampled)
    found = index.search(queries, K + 1)[0]
    ours = np.mean([len(set(row[row != me][:K]) & set(t)) / K for row, me, t in zip(found, sampled, truth)])
    setting = ", ".join(f"{k}={v}" for k, v in record["setting"].items())
    flags = lscpu_flags()
    block = "\n".join(
        [
            f"### tune checked on {len(index.ids):,} x {index.dims} (ScaNN, {index.params['num_leaves']} leaves)",
            "",
            f"Command: `{rerun_command(__file__, argv)}`. Machine: {machine()}, shared; lscpu flags: {flags}",
            "",
            "| rows | target | settings measured | chosen | recall@10 tune reported | recall@10 by our exact search | "
            "QPS | tune took |",
            "|---|---|---|---|---|---|---|---|",
            f"| {len(index.ids):,} | {args.target_recall} | {len(record['measurements'])} | {setting} | "
            f"{record['recall']:.4f} | {ours:.4f} | {record['qps']:,.0f} | {tune_s / 60:.1f} min |",
            "",
            f"Plot: `{record['plot']}`.",
        ]
    )
    publish(block, args.results, SECTION, not args.no_record)


if __name__ == "__main__":
    main()
