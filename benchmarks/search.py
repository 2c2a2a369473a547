"""Benchmarks exact and ScaNN search of `gtr_keras.storage.search_index.SearchIndex`.

For each corpus size, builds both kinds of index over the same embeddings and
reports build time, batched and single-query throughput, and ScaNN's
recall@10 against exact search. By default the embeddings are synthetic:
unit vectors around `--clusters` random centres; `--embeddings` benchmarks
real ones instead. Results are printed and appended to the "## Search"
section of `benchmarks/RESULTS.md`.

Usage:
    PYTHONPATH=. python benchmarks/search.py --sizes 10000 100000
    PYTHONPATH=. python benchmarks/search.py --embeddings corpus.npy --query-embeddings queries.npy
    PYTHONPATH=. python benchmarks/search.py --embeddings corpus.npy --num-queries 1000
"""

import argparse
import datetime
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
from results import RESULTS, machine, publish, rerun_command

from gtr_keras.storage.scann_builder import scann_params
from gtr_keras.storage.search_index import SearchIndex

K = 10
SECTION = "## Search"


def _normalise(x):
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def synthetic(n, centres, noise, rng, chunk=100_000):
    """`n` unit vectors: a random centre plus gaussian noise of norm ~`noise`."""
    out = np.empty((n, centres.shape[1]), dtype=np.float32)
    for start in range(0, n, chunk):
        rows = min(chunk, n - start)
        noise_rows = rng.standard_normal((rows, centres.shape[1]), dtype=np.float32)
        noise_rows *= noise / np.sqrt(centres.shape[1])
        points = centres[rng.integers(len(centres), size=rows)] + noise_rows
        out[start : start + rows] = _normalise(points)
    return out


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def measure(index, queries, exact_indices, single_queries):
    """Batched QPS, single-query QPS and recall@10 of a built index."""
    (indices, _), batched_s = _timed(index.search, queries, K)
    single = queries[:single_queries]
    start = time.perf_counter()
    for row in range(len(single)):
        index.search(single[row : row + 1], K)
    single_s = time.perf_counter() - start
    if exact_indices is None:
        exact_indices = indices
    recall = np.mean([len(set(a) & set(e)) / K for a, e in zip(indices, exact_indices)])
    return indices, {
        "batched_qps": len(queries) / batched_s,
        "single_qps": len(single) / single_s,
        "recall": recall,
    }


def run(corpus, queries, args):
    """Rows of the results table for one corpus.

    Each of `args.search_variants` (dicts of search-time ScaNN parameters)
    adds a row measured on the same ScaNN build.
    """
    n, dims = corpus.shape
    ids = [str(i) for i in range(n)]
    exact, exact_build_s = _timed(SearchIndex, ids, corpus, kind="exact")
    exact_indices, stats = measure(exact, queries, None, args.single_queries)
    rows = [{"n": n, "dims": dims, "method": "exact", "build_s": exact_build_s, **stats}]
    del exact
    params = {**scann_params(n), **args.scann_params}
    approx, build_s = _timed(SearchIndex, ids, corpus, kind="scann", params=params)
    for variant in [{}, *args.search_variants]:
        approx.params = {**params, **variant}
        _, stats = measure(approx, queries, exact_indices, args.single_queries)
        method = " ".join(["scann", *(f"{key}={value}" for key, value in variant.items())])
        rows.append({"n": n, "dims": dims, "method": method, "params": params, "build_s": build_s, **stats})
    return rows


def table(rows):
    lines = [
        "| N | D | method | build s | QPS batched | QPS single | recall@10 |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {r['dims']} | {r['method']} | {r['build_s']:.2f} | "
            f"{r['batched_qps']:,.0f} | {r['single_qps']:,.0f} | {r['recall']:.4f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="synthetic corpus sizes")
    parser.add_argument("--dims", type=int, default=768)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--noise", type=float, default=1.0, help="noise norm around a centre")
    parser.add_argument("--num-queries", type=int, default=1000)
    parser.add_argument("--single-queries", type=int, default=200, help="queries timed singly")
    parser.add_argument("--embeddings", help="real [N, D] embeddings (.npy); replaces --sizes")
    parser.add_argument("--query-embeddings", help="queries (.npy); default: held-out rows")
    parser.add_argument("--scann-params", type=json.loads, default={}, help="JSON overrides of scann_params(N)")
    parser.add_argument(
        "--search-variants",
        type=json.loads,
        default=[],
        help='JSON list of search-time overrides to measure on the same build, e.g. [{"reorder_factor": 10}]',
    )
    parser.add_argument("--results", default=RESULTS, help="markdown file to append to")
    parser.add_argument("--no-record", action="store_true", help="print only")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.UTC)
    if args.embeddings:
        corpus = np.load(args.embeddings).astype(np.float32, copy=False)
        if args.query_embeddings:
            queries = np.load(args.query_embeddings).astype(np.float32, copy=False)
            data = f"`{args.embeddings}`, queries `{args.query_embeddings}`"
        else:
            corpus, queries = corpus[: -args.num_queries], corpus[-args.num_queries :]
            data = f"`{args.embeddings}`, queries = its last {len(queries)} rows (held out)"
        corpora = [corpus]
    else:
        rng = np.random.default_rng(args.seed)
        centres = _normalise(rng.standard_normal((args.clusters, args.dims), dtype=np.float32))
        queries = synthetic(args.num_queries, centres, args.noise, rng)
        corpora = (synthetic(n, centres, args.noise, rng) for n in args.sizes)
        data = (
            f"synthetic: unit vectors around {args.clusters} random centres, "
            f"noise norm {args.noise}; "
            f"{len(queries)} queries drawn the same way (not from the corpus)"
        )
    rows = []
    for corpus in corpora:
        rows += run(corpus, np.ascontiguousarray(queries), args)
        print(table(rows), flush=True)

    load_after = os.getloadavg()
    params = "\n".join(f"  - N={r['n']:,}: `{json.dumps(r['params'])}`" for r in rows if r["method"] == "scann")
    command = rerun_command(__file__, argv)
    ram_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    kind = "real" if args.embeddings else "synthetic"
    block = f"""### {started:%Y-%m-%d %H:%M} UTC: {kind} embeddings

Command: `{command}`

- Machine: {machine()}, {ram_gib:.0f} GiB RAM, 1-min load average {load_before[0]:.2f} before
  and {load_after[0]:.2f} after the run. The CPUs are shared with other agents, so timings
  are indicative only.
- Data: {data}.
- QPS batched: all {len(queries)} queries in one `search` call; QPS single: the first
  {min(args.single_queries, len(queries))} queries one `search` call each. k={K}.
  Recall@10 is the overlap with exact search. Build s for exact is validation only.
  Rows `scann key=value` search the build of the `scann` row above them with those
  search-time parameters.
- ScaNN parameters (`scann_params(N)`{" with overrides" if args.scann_params else ""}):
{params}

{table(rows)}
"""
    publish(block, args.results, SECTION, record_it=not args.no_record)


if __name__ == "__main__":
    main()
