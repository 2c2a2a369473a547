"""Recall@10 and QPS of a built ScaNN index as the search-time parameters vary.

Reads a work directory of `benchmarks/large_index.py` (its `index/`, `queries.npy` and `exact.npy`, the
exact top-10 ids) and searches the same index with each `reorder_factor` x `num_leaves_to_search` given:
how `scann_params` chose the reorder pool. Prints a table (nothing is recorded).

Usage:
    PYTHONPATH=. python benchmarks/reorder_pool.py --work /tmp/large-msmarco --reorder-factors 100 400 800
"""

import argparse
import os
import time

import numpy as np

from gtr_keras.storage.search_index import SearchIndex


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="a work directory of benchmarks/large_index.py")
    parser.add_argument("--reorder-factors", type=int, nargs="+", required=True)
    parser.add_argument("--leaves", type=int, nargs="+", help="num_leaves_to_search values (default: the index's)")
    parser.add_argument("--num-queries", type=int, default=300, help="the first N queries")
    args = parser.parse_args(argv)

    index = SearchIndex.load(os.path.join(args.work, "index"))
    queries = np.load(os.path.join(args.work, "queries.npy"))[: args.num_queries]
    exact = np.load(os.path.join(args.work, "exact.npy"), allow_pickle=True)[: args.num_queries]
    print(f"N={len(index.ids):,}, {len(queries)} queries, {index.params['num_leaves']} leaves")
    print("| leaves searched | reorder_factor | recall@10 | QPS batched |\n|---:|---:|---:|---:|")
    for leaves in args.leaves or [index.params["num_leaves_to_search"]]:
        for factor in args.reorder_factors:
            index.params.update(num_leaves_to_search=leaves, reorder_factor=factor)
            start = time.perf_counter()
            found, _ = index.search_ids(queries, 10)
            qps = len(queries) / (time.perf_counter() - start)
            recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(found, exact)])
            print(f"| {leaves} | {factor} | {recall:.4f} | {qps:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
