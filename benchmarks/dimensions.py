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
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
from beir_runs import add_dataset_arguments, load_subset, metrics_of, parse_arguments, report, started

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
    add_dataset_arguments(parser)
    parser.add_argument("--model", nargs="+", default=[BUNDLED_MODEL_DIR], help="model directories or names")
    parser.add_argument("-k", type=int, default=100, help="hits a query (Recall@100 needs 100)")
    parser.add_argument("--repeats", type=int, default=3, help="timed searches of all the queries; the best is kept")
    parser.set_defaults(section=SECTION)
    args = parse_arguments(parser, argv)
    start, sizes, rows = started(), {}, []
    for model in args.model:
        encoder = load(model)
        for name in args.datasets:
            sizes[name], model_rows = measure(args, model, encoder, name)
            rows += model_rows
    table = [
        "| model | dataset | dimensions | NDCG@10 | Recall@100 | index bytes | queries/s |",
        "|---|---|---:|---:|---:|---:|---:|",
        *rows,
    ]
    facts = (
        f"{'; '.join(sizes.values())}; exact search of query vectors, k={args.k}, the best of {args.repeats} calls; "
        '"trained": a size the model was trained for (`matryoshka_dims`).'
    )
    report(__file__, argv, args, "embeddings cut to D, D/2, D/4, D/8", start, facts, table)


if __name__ == "__main__":
    main()
