"""Recall of ScaNN's float32 rescoring against numpy float32 brute force, on issue 52's synthetic case.

The data and queries of `tests/tuning/test_tuner.py::test_acceptance_40k` (40,000 x 64 unit vectors around 200
centres, noise 0.35, whose neighbours lie closer together than int8 rounding; 300 held-out queries), indexed as
that test does (`gtr-keras index --embeddings` of 4 embedding files: ScaNN, its default parameters), then
searched through `set_search_params`:

1. recall@10 by leaves searched, AH candidates reordered on int8 (`reorder_factor`) and float32 rescoring pool
   (`rescore_factor`; 1 rescores int8's own top 10: int8 order);
2. recall@k at depth 10, 100 and 1000 by `rescore_factor`, every leaf searched, reorder 20: the rescoring pool
   of `SearchIndex.rescore_pool` (k plus at most 100 a step) against a pool of `rescore_factor * k` (the
   `rescore_factor` that gives it).

Recall only, no timing: it may run on a busy machine. Prints the tables and appends them, with the command, to
the "Float32 rescoring" section of benchmarks/RESULTS.md (`--no-record`: print only).

Usage:
    PYTHONPATH=. python benchmarks/rescoring_recall.py --work /tmp/rescoring-40k
"""

import argparse
import os
import subprocess
import sys
import time

import numpy as np
from results import RESULTS, machine, publish, rerun_command

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from search_inputs import clustered, doc_ids, float32_truth  # noqa: E402  (the acceptance test's data)

SECTION = "## Float32 rescoring"
N, CENTRES, NOISE = 40_000, 200, 0.35


def recall(found, truth):
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


def build(work, vectors):
    """The acceptance test's index: `gtr-keras index --embeddings` of 4 embedding files, in `work`."""
    index = os.path.join(work, "index")
    if not os.path.exists(index):
        os.makedirs(os.path.join(work, "emb"), exist_ok=True)
        for number, rows in enumerate(np.array_split(np.arange(len(vectors)), 4)):
            np.save(os.path.join(work, "emb", f"part-{number}.npy"), vectors[rows])
            with open(os.path.join(work, "emb", f"part-{number}.ids.txt"), "w") as f:
                f.writelines(f"{doc_ids(len(vectors))[i]}\n" for i in rows)
        embeddings = os.path.join(work, "emb", "part-*.npy")
        subprocess.run(
            [sys.executable, "-m", "gtr_keras", "index", "--embeddings", embeddings, "--out", index], check=True
        )
    return index


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="a directory for the embedding files and the index")
    parser.add_argument("--leaves", type=int, nargs="+", default=[2, 4, 8, 20])
    parser.add_argument("--reorder-factors", type=int, nargs="+", default=[20, 50])
    parser.add_argument("--rescore-factors", type=int, nargs="+", default=[1, 2, 3, 5])
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    from gtr_keras.storage.search_index import SearchIndex

    vectors = clustered(N, seed=11, num_clusters=CENTRES, noise=NOISE)
    queries = clustered(300, seed=12, num_clusters=CENTRES, noise=NOISE)
    index = SearchIndex.load(build(args.work, vectors))
    exact = float32_truth(vectors, queries, 1000)
    ids = np.array(index.ids)

    def found(k):
        return [[int(i.removeprefix("doc-")) for i in row] for row in ids[index.search(queries, k)[0]]]

    header = " | ".join(f"rescore_factor {f}" for f in args.rescore_factors)
    lines = [f"| leaves searched | reorder_factor | {header} |", "|---:|---:|" + "---:|" * len(args.rescore_factors)]
    for leaves in args.leaves:
        for reorder in args.reorder_factors:
            cells = []
            for factor in args.rescore_factors:
                setting = {"num_leaves_to_search": leaves, "reorder_factor": reorder, "rescore_factor": factor}
                index.set_search_params(setting)
                cells.append(f"{recall(found(10), exact[:, :10]):.4f}")
            lines.append(f"| {leaves} | {reorder} | " + " | ".join(cells) + " |")
    depth = ["| k | rescore_factor | pool (rescore_pool_size) | recall@k | pool (rescore_factor x k) | recall@k |"]
    depth.append("|---:|---:|---:|---:|---:|---:|")
    index.set_search_params({"num_leaves_to_search": index.params["num_leaves"], "reorder_factor": 20})
    for k in (10, 100, 1000):
        for factor in (1, 2, 4):
            cells = []
            # `factor`, then the factor whose pool is factor x k: k + (f - 1) * min(k, 100) = factor * k.
            for pooled in (factor, (factor - 1) * k // min(k, 100) + 1):
                index.set_search_params({"rescore_factor": pooled})
                cells += [str(index.rescore_pool(k)), f"{recall(found(k), exact[:, :k]):.4f}"]
            depth.append(f"| {k} | {factor} | " + " | ".join(cells) + " |")
    block = "\n".join(
        [
            f"### {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: float32 rescoring on issue 52's case "
            f"({N:,} x 64, {CENTRES} centres, noise {NOISE}; 300 held-out queries)",
            "",
            f"- Command: `{rerun_command(__file__, argv)}`",
            f"- Machine: {machine()} (recall only, no timing)",
            f"- Index: `gtr-keras index --embeddings` (4 files), {index.params['num_leaves']} leaves; recall "
            "against numpy float32 brute force",
            "",
            "recall@10:",
            "",
            *lines,
            "",
            "recall@k at depth, every leaf searched, reorder_factor 20:",
            "",
            *depth,
        ]
    )
    publish(block, args.results, SECTION, not args.no_record)


if __name__ == "__main__":
    main()
