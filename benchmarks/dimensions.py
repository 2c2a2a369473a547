"""Smaller vectors: NDCG@10, index size and search speed of embeddings cut to D, D/2, D/4 and D/8 dimensions.

For each model (`--model`, repeatable: the bundled one by default; a Matryoshka fine-tune, `gtr-keras train
--matryoshka-dims`, beside it) and each dataset (SciFact, NFCorpus, Cranfield in `--data`, BEIR layout), the
documents (`"title text"`, the model's document budget) and the test queries are encoded once at D; then, for
each N, an exact index of the first N coordinates renormalised is built from those embeddings
(`gtr_keras.Index.build(embeddings=..., dimensions=N)`, as `gtr-keras index --dimensions N` indexes) and
searched with the queries' first N coordinates renormalised (vectors in, `k` 100, the best of `--repeats`
timed calls of all the queries at once). The table gives NDCG@10 and Recall@100 (pytrec-eval), the bytes of the
index directory (BM25 side left out) and queries a second.

Usage:
    PYTHONPATH=. python benchmarks/dimensions.py
    PYTHONPATH=. python benchmarks/dimensions.py --model gtr_keras/assets/gtr-small-distilled models/matryoshka
    PYTHONPATH=. python benchmarks/dimensions.py --quick  # a small subset, not recorded
"""

import argparse
import datetime
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
from beir_runs import DATA_DIR, DATASETS, QUICK_DOCS, QUICK_QUERIES, load_subset, metrics_of
from results import RESULTS, lscpu_flags, machine, publish, rerun_command

from gtr_keras import Index, load
from gtr_keras.models import BUNDLED_MODEL_DIR
from gtr_keras.utils.dimensions import truncate

SECTION = "## Dimensions"


def _bytes(directory):
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(directory) for name in names)


def measure(args, model, encoder, name):
    """The table rows of one model on one dataset, N from D down to D/8."""
    corpus, queries, qrels = load_subset(os.path.join(args.data, name), args.max_docs, args.max_queries)
    documents = encoder.encode_documents(corpus.joined(), batch_size=args.batch_size)
    query_vectors = encoder.encode_queries(list(queries.values()), batch_size=args.batch_size)
    trained = set(encoder.matryoshka_dims)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        embeddings = os.path.join(scratch, "documents.npz")
        np.savez(embeddings, ids=np.array(corpus.ids), embeddings=documents)
        for dimensions in (encoder.embedding_dim >> shift for shift in range(4)):
            path = os.path.join(scratch, f"index-{dimensions}")
            index = Index.build(
                path, embeddings=embeddings, model=encoder, exact=True, bm25=False, dimensions=dimensions
            )
            vectors = truncate(query_vectors, dimensions)
            seconds = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                hits = index.search(vectors, k=args.k)
                seconds.append(time.perf_counter() - start)
            run = {qid: {hit["id"]: hit["score"] for hit in row} for qid, row in zip(queries, hits)}
            ndcg, recall = metrics_of(qrels, run)
            label = f"{dimensions}" + (" (trained)" if dimensions in trained else "")
            rows.append(
                f"| {os.path.basename(os.path.normpath(model))} | {name} | {label} | {ndcg:.4f} | {recall:.4f} | "
                f"{_bytes(path):,} | {len(queries) / min(seconds):,.0f} |"
            )
            print(rows[-1], flush=True)
    return f"{name}: {len(corpus):,} documents, {len(queries):,} queries", rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=DATA_DIR, help="the folder of the BEIR datasets")
    parser.add_argument("--datasets", nargs="+", default=DATASETS)
    parser.add_argument("--model", nargs="+", default=[BUNDLED_MODEL_DIR], help="model directories or names")
    parser.add_argument("-k", type=int, default=100, help="hits a query (Recall@100 needs 100)")
    parser.add_argument("--repeats", type=int, default=3, help="timed searches of all the queries; the best is kept")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-docs", type=int, help="a subset: the judged documents first, then others")
    parser.add_argument("--max-queries", type=int, help="a subset: the first judged queries")
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_DOCS} documents, {QUICK_QUERIES} queries, not recorded"
    )
    parser.add_argument("--results", default=RESULTS, help="markdown file to append to")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if args.quick:
        args.max_docs, args.max_queries = args.max_docs or QUICK_DOCS, args.max_queries or QUICK_QUERIES
    started, load_before = datetime.datetime.now(datetime.UTC), os.getloadavg()[0]
    sizes, rows = {}, []
    for model in args.model:
        encoder = load(model)
        for name in args.datasets:
            sizes[name], model_rows = measure(args, model, encoder, name)
            rows += model_rows
    subset = " A subset: not the datasets' numbers." if args.max_docs or args.max_queries else ""
    block = "\n".join(
        [
            f"### {started:%Y-%m-%d %H:%M} UTC: embeddings cut to D, D/2, D/4, D/8",
            "",
            f"Command: `{rerun_command(__file__, argv)}`. Machine: {machine()}, 1-min load average "
            f"{load_before:.2f} before and {os.getloadavg()[0]:.2f} after; lscpu flags: {lscpu_flags()}. "
            f"{'; '.join(sizes.values())}; exact search of query vectors, k={args.k}, the best of {args.repeats} "
            f'calls; "trained": a size the model was trained for (`matryoshka_dims`).{subset}',
            "",
            "| model | dataset | dimensions | NDCG@10 | Recall@100 | index bytes | queries/s |",
            "|---|---|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )
    publish(block, args.results, SECTION, not (args.no_record or args.quick))


if __name__ == "__main__":
    main()
