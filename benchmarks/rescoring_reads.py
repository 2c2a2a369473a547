"""The cost of float32 rescoring in a ScaNN search: ScaNN's candidates and their rescoring timed apart, and the
float32 rows read from the index's file, as rescoring reads them (`os.preadv`) and through a memory map.

For a local ScaNN index with float32 vectors (`--index`, e.g. the one `benchmarks/scann_memory.py` builds at
1M x 768) and query vectors (`--queries`, `.npy`), at one search setting (`--setting`, JSON):

- `SearchIndex.candidates` (AH, int8 reordering) and `SearchIndex.rescored` (float32) on every query in one
  call, each the best of `--repeats`, and the QPS of the two together;
- `--rows` distinct random rows (seed 0, drawn again each repeat) read and scored for one query by
  `FloatRows.rescore` (its reads), against the same rows read through a memory map of the file
  (`np.asarray(floats[rows])`, pages left mapped): medians of `--repeats`.

The float32 file is read whole once first, so that its pages are in the page cache, as in a process that has
served for a while (`--cold` leaves it as it is). Run it alone: other jobs on the cores change every figure.

Prints a table and appends it to the "## Float32 rescoring" section of RESULTS.md.

    PYTHONPATH=. python benchmarks/rescoring_reads.py --index /tmp/frontier-1m/index \
        --queries /tmp/frontier-1m/queries.npy
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
from results import RESULTS, lscpu_flags, machine, publish, rerun_command

SECTION = "## Float32 rescoring"
K = 10


def best_seconds(function, repeats):
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - start)
    return min(seconds), result


def main(argv=None):
    from gtr_keras.storage.layout import EMBEDDINGS_NPY, read_description
    from gtr_keras.storage.search_index import SearchIndex

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", required=True, help="a local ScaNN index with float32 vectors")
    parser.add_argument("--queries", required=True, help="float32 query vectors, .npy")
    parser.add_argument(
        "--setting",
        default='{"num_leaves_to_search": 2, "reorder_factor": 100, "rescore_factor": 2}',
        help="the search setting, JSON",
    )
    parser.add_argument("--rows", type=int, default=20000, help="random rows read for the read comparison")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cold", action="store_true", help="do not read the float32 file once first")
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)

    directory = read_description(args.index)[0]
    if not args.cold:
        with open(os.path.join(directory, EMBEDDINGS_NPY), "rb") as f:
            while f.read(2**26):
                pass
    index = SearchIndex.load(directory)
    if index.float_rows is None:
        parser.error(f"--index: {args.index} keeps no float32 vectors to rescore with")
    index.set_search_params(json.loads(args.setting))
    queries = np.load(args.queries)
    pool = index.rescore_pool(K)
    found_seconds, candidates = best_seconds(lambda: index.candidates(queries, pool, K), args.repeats)
    rescored_seconds, _ = best_seconds(lambda: index.rescored(queries, *candidates, K), args.repeats)

    floats, ranks = index.float_rows.floats, np.arange(len(index.float_rows.floats))
    ways = {
        "preadv": lambda drawn: index.float_rows.rescore(queries[:1], drawn[None], K, ranks),
        "map": lambda drawn: np.asarray(floats[drawn]),
    }
    rng, seconds = np.random.default_rng(0), {way: [] for way in ways}
    for _ in range(args.repeats):
        for way, read in ways.items():
            drawn = np.unique(rng.integers(0, len(floats), args.rows))
            seconds[way].append(best_seconds(lambda: read(drawn), 1)[0])
    reads, mapped = statistics.median(seconds["preadv"]), statistics.median(seconds["map"])

    n = len(queries)
    lines = [
        f"### {len(floats):,} x {floats.shape[1]}: what float32 rescoring costs",
        "",
        f"Command: `{rerun_command(__file__, argv)}`. Machine: {machine()}; lscpu flags: {lscpu_flags()}. "
        f"Python {sys.version.split()[0]}. Setting {args.setting}: {pool} candidates a query rescored. The "
        f"float32 file {'as the page cache had it' if args.cold else 'read whole once first (in the page cache)'}.",
        "",
        "| what | time | per query or row |",
        "|---|---:|---:|",
        f"| ScaNN's candidates (AH, int8 reordering), {n:,} queries in one call | {found_seconds * 1e3:,.1f} ms | "
        f"{found_seconds / n * 1e6:,.1f} us |",
        f"| their float32 rescoring | {rescored_seconds * 1e3:,.1f} ms | {rescored_seconds / n * 1e6:,.1f} us |",
        f"| QPS without rescoring / with | {n / found_seconds:,.0f} / {n / (found_seconds + rescored_seconds):,.0f} "
        "| |",
        f"| {args.rows:,} random rows read and scored by rescoring (`os.preadv`), median | "
        f"{reads * 1e3:,.1f} ms | {reads / args.rows * 1e6:,.2f} us |",
        f"| the same number read through a memory map of the file, median | {mapped * 1e3:,.1f} ms "
        f"| {mapped / args.rows * 1e6:,.2f} us |",
    ]
    publish("\n".join(lines), args.results, SECTION, not args.no_record)


if __name__ == "__main__":
    main()
