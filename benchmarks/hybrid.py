"""Benchmarks the BM25 side of an index and hybrid search (`gtr_keras.retrieval.hybrid_retriever`).

Two measurements, each appended to the "## Hybrid search" section of `benchmarks/RESULTS.md`:

- `--corpus C`: what the BM25 side adds to `gtr-keras index --corpus C`: the dense build
  (`build_index(..., bm25=False)`: encoding and the exact index) against the BM25 side alone
  (`bm25_side.write_bm25_side`: tokenizing, indexing and saving), in seconds and bytes on disk.
- `--index I`: search latency of `gtr`, `bm25` and `hybrid` on an index with a BM25 side (the demo's:
  `gtr-keras demo --out D` writes `D/index`), text in and hits out, query encoding included: each of the
  first `--num-queries` queries of `--dataset` searched alone (the three retrievers taking turns), and all
  of them in one call.

Usage:
    PYTHONPATH=. python benchmarks/hybrid.py --corpus ../shared/data/scifact
    PYTHONPATH=. python benchmarks/hybrid.py --index gtr-demo/index
"""

import argparse
import datetime
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
from results import RESULTS, machine, publish, rerun_command

from gtr_keras import load
from gtr_keras.beir import BUNDLED_COLLECTION_DIR, load_corpus, load_queries
from gtr_keras.lexical.bm25_side import write_bm25_side
from gtr_keras.lexical.fusion import model_fusion
from gtr_keras.models import BUNDLED_MODEL_DIR
from gtr_keras.retrieval.hybrid_retriever import RETRIEVERS, HybridRetriever
from gtr_keras.retrieval.index_building import build_index
from gtr_keras.storage.layout import BM25_SUBDIR, INDEX_SUBDIR

SECTION = "## Hybrid search"


def _bytes(directory):
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(directory) for name in names)


def side_cost(args, encoder):
    corpus = load_corpus(args.corpus)
    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        build_index(encoder, corpus, os.path.join(scratch, "index"), args.model, bm25=False)
        dense_s = time.perf_counter() - start
        start = time.perf_counter()
        write_bm25_side(scratch, corpus)
        bm25_s = time.perf_counter() - start
        dense_bytes = _bytes(os.path.join(scratch, "index", INDEX_SUBDIR))
        bm25_bytes = _bytes(os.path.join(scratch, BM25_SUBDIR))
    return (
        f"- Corpus: `{args.corpus}`, {len(corpus):,} documents; model `{args.model}` (D={encoder.embedding_dim}).\n\n"
        "| part | build s | bytes on disk |\n|---|---:|---:|\n"
        f"| dense (encode + exact index, `index/`) | {dense_s:.1f} | {dense_bytes:,} |\n"
        f"| BM25 side (`bm25/`) | {bm25_s:.1f} | {bm25_bytes:,} |\n"
        f"| BM25 side / dense | {bm25_s / dense_s:.3f} | {bm25_bytes / dense_bytes:.3f} |"
    )


def latency(args, encoder):
    hybrid = HybridRetriever.load(args.index, encoder, model_fusion(args.model))
    queries = list(load_queries(args.dataset).values())[: args.num_queries]
    seconds = {name: [] for name in RETRIEVERS}
    for name in RETRIEVERS:
        hybrid.search(queries[:2], args.k, name)  # warm-up: traced functions, caches
    for query in queries:
        for name in RETRIEVERS:
            start = time.perf_counter()
            hybrid.search([query], args.k, name)
            seconds[name].append(time.perf_counter() - start)
    batched = {}
    for name in RETRIEVERS:
        start = time.perf_counter()
        hybrid.search(queries, args.k, name)
        batched[name] = time.perf_counter() - start
    rows = "\n".join(
        f"| {name} | {1000 * np.median(seconds[name]):.1f} | {1000 * np.percentile(seconds[name], 90):.1f} | "
        f"{len(queries) / batched[name]:,.0f} |"
        for name in RETRIEVERS
    )
    return (
        f"- Index: `{args.index}` ({len(hybrid.retriever.index.ids):,} documents, {hybrid.retriever.index.kind}); "
        f"queries: the first {len(queries)} of `{args.dataset}`; k={args.k}; hybrid: "
        f"`{hybrid.get_config()}` (each side {hybrid.depth} deep).\n\n"
        "| retriever | ms / query, single (median) | ms / query, single (p90) | queries/s, one batched call |\n"
        f"|---|---:|---:|---:|\n{rows}"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", help="measure the BM25 side's cost on this corpus (BEIR directory)")
    parser.add_argument("--index", help="measure search latency on this index directory (with a BM25 side)")
    parser.add_argument("--model", default=BUNDLED_MODEL_DIR)
    parser.add_argument("--dataset", default=BUNDLED_COLLECTION_DIR, help="where the queries are")
    parser.add_argument("--num-queries", type=int, default=100)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--results", default=RESULTS, help="markdown file to append to")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if not (args.corpus or args.index):
        parser.error("give --corpus, --index or both")
    encoder = load(args.model)
    load_before, started = os.getloadavg(), datetime.datetime.now(datetime.UTC)
    parts = [side_cost(args, encoder)] if args.corpus else []
    parts += [latency(args, encoder)] if args.index else []
    block = f"""### {started:%Y-%m-%d %H:%M} UTC

Command: `{rerun_command(__file__, argv)}`

- Machine: {machine()}, 1-min load average {load_before[0]:.2f} before and {os.getloadavg()[0]:.2f} after the
  run. The CPUs are shared with other agents, so timings are indicative only.
""" + "\n\n".join(parts)
    publish(block, args.results, SECTION, not args.no_record)


if __name__ == "__main__":
    main()
