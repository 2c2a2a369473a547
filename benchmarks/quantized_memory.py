"""Search memory at corpus scale: exact indexes of float32, int8 and binary vectors (`index --vectors`), and
ScaNN with its candidates rescored on float32 (`index`, the default), side by side.

On `large_index.py`'s synthetic embedding files (written once into `--work/embeddings`, reused), builds one exact index
per vector type with `gtr-keras index --embeddings ... --vectors V` and a ScaNN one with `gtr-keras index
--embeddings ...`, then searches each in a process of its own under `/usr/bin/time -v` (`large_index.search`:
`SearchIndex.load`, whose ScaNN search applies the setting `gtr-keras tune` recorded, and one batched
`search_ids` of every query, then `--steady-queries` more queries drawn the same way, searched in batches of
`--num-queries`): its peak RSS, load time, QPS (of the first batch), recall@10 against the float32 index's
answers, and the file pages mapped after the first and the last steady batches (`RssFile`). The peak RSS counts
the pages of `embeddings.npy` a search touched through a memory map (float32's whole file, which exact search
scans); the quantized indexes and ScaNN read their candidates' rows with `os.preadv` (since issue 62; through
a memory map let go under a 128 MiB budget before), which maps none.

Usage:
    PYTHONPATH=. python benchmarks/quantized_memory.py --n 1000000 --num-queries 200 --work /tmp/frontier-1m
    # ScaNN at a recall of 0.99: tune it, then search the indexes built again
    gtr-keras tune --index /tmp/frontier-1m/index-scann --target-recall 0.99
    PYTHONPATH=. python benchmarks/quantized_memory.py --n 1000000 --num-queries 200 --work /tmp/frontier-1m --reuse
"""

import argparse
import json
import os

import numpy as np
from large_index import add_corpus_arguments, corpus_centres, recall, search, timed_process, write_embedding_files
from results import RESULTS, lscpu_flags, machine, publish, rerun_command
from search import synthetic

SECTION = "## Quantized exact search"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_arguments(parser)
    parser.add_argument("--work", required=True, help="directory for embedding files and indexes (kept for reruns)")
    parser.add_argument("--reuse", action="store_true", help="search the indexes a previous run built in --work")
    parser.add_argument(
        "--steady-queries",
        type=int,
        default=20_000,
        help="queries searched after the first batch, in batches of --num-queries, until the mapped pages level off",
    )
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    embeddings_dir = os.path.join(args.work, "embeddings")
    write_embedding_files(args, embeddings_dir)
    queries = os.path.join(args.work, "queries.npy")
    steady = os.path.join(args.work, f"queries-steady-{args.steady_queries}.npy")
    if not os.path.exists(steady):
        _, centres = corpus_centres(args)
        rng = np.random.default_rng([args.seed, args.steady_queries])
        np.save(steady, synthetic(args.steady_queries, centres, args.noise, rng))
    rows, gib, mib = [], 2**30, 2**20
    for vectors in ("float32", "int8", "binary", "scann"):
        index_dir = os.path.join(args.work, "index-scann" if vectors == "scann" else f"exact-{vectors}")
        command = ["gtr-keras", "index", "--embeddings", os.path.join(embeddings_dir, "*.npy"), "--out", index_dir]
        command += {"float32": ["--exact"], "scann": []}.get(vectors, ["--vectors", vectors])
        built = "reused"
        if not (args.reuse and os.path.isdir(index_dir)):
            _, build_peak, build_s = timed_process(command)
            built = f"{build_s / 60:.1f} min ({build_peak / gib:.2f} GiB)"
        found = os.path.join(args.work, f"found-{vectors}.npy")
        measured = search(index_dir, queries, found, 0, steady if args.steady_queries else None)
        mapped = measured["mapped_file_bytes"] or [0]
        quality = recall(found, os.path.join(args.work, "found-float32.npy"))
        held = {"float32": 4 * args.dims, "int8": args.dims, "binary": (args.dims + 7) // 8}.get(vectors, 0) * args.n
        if vectors == "scann":  # ScaNN's files, read into memory
            scann_dir = os.path.join(index_dir, "index", "scann")
            held = sum(os.path.getsize(os.path.join(scann_dir, name)) for name in os.listdir(scann_dir))
        rows.append(
            f"| {vectors} | {_setting(measured['params'])} | {held / gib:.2f} GiB | "
            f"{built} | {measured['load_s']:.1f} s | "
            f"{measured['search_peak_rss'] / gib:.2f} GiB | {mapped[0] / mib:,.0f} -> {mapped[-1] / mib:,.0f} MiB | "
            f"{measured['batched_qps']:,.1f} | {quality:.4f} |"
        )
        print(rows[-1], flush=True)
    flags = lscpu_flags()
    block = "\n".join(
        [
            f"### Search memory at {args.n:,} x {args.dims} (synthetic, {args.clusters} clusters), "
            f"{args.num_queries} queries, then {args.steady_queries:,} more in batches of as many",
            "",
            f"Command: `{rerun_command(__file__, argv)}`. Machine: {machine()}, shared; lscpu flags: {flags}",
            "",
            "| vectors | search setting | codes (or float32, or ScaNN) held | build (peak RSS) | load | "
            "search peak RSS | file pages mapped, first -> last steady batch | QPS batched | recall@10 vs float32 |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    publish(block, args.results, SECTION, not args.no_record)


def _setting(params):
    """The search setting of an index's `params`: an exact index's rescored candidates, ScaNN's pools."""
    if not params:
        return "-"
    names = ("num_leaves_to_search", "reorder_factor", "rescore_factor", "reorder", "rescore")
    return json.dumps({name: params[name] for name in names if name in params}).replace("|", "/")


if __name__ == "__main__":
    main()
