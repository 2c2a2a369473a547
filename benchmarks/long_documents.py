"""Long documents: NDCG@10 and Recall@100 of first-window, passages and late chunking on BEIR datasets.

For each dataset (SciFact, NFCorpus, Cranfield in `--data`, BEIR layout) and the model (`--model`, the bundled
one by default), four ways of embedding a document, each searched exactly with the test queries and scored
with pytrec-eval (`gtr_keras.beir.evaluation`):

- `first window`: the plain index: `"title text"` truncated to the model's `document_length`;
- `passages T:S` (each `--passages`): the token windows of `gtr-keras index --passages T:S`
  (`gtr_keras.retrieval.passages.window_corpus`: the title and T pieces every S), each encoded alone; a
  document scores its best window's score (MaxP);
- `late chunking T:S`: the windows of `passages T:S`, each pooled from a forward pass of its whole `"title
  text"` (segments of `--document-length` tokens past that: `gtr_keras.models.late_chunking.LateChunks`); MaxP.

The windows need `gtr_keras.retrieval.passages` and `gtr_keras.models.late_chunking` (issue 61, parts 1 and 2):
where the installed gtr_keras lacks them, those configurations are skipped with a message. The table gives the rows
encoded and the seconds the encoding took (queries excluded).

Usage:
    PYTHONPATH=. python benchmarks/long_documents.py
    PYTHONPATH=. python benchmarks/long_documents.py --quick  # a small subset, not recorded
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
from beir_runs import (
    add_dataset_arguments,
    load_subset,
    metrics_of,
    parse_arguments,
    report,
    run_of,
    scores_of,
    started,
)

from gtr_keras import load
from gtr_keras.models import BUNDLED_MODEL_DIR

SECTION = "## Long documents"


def windowing():
    """`(models.late_chunking.LateChunks, retrieval.passages)` of the installed gtr_keras, or None with the reason
    printed."""
    try:
        from gtr_keras.models.late_chunking import LateChunks
        from gtr_keras.retrieval import passages as index_passages
    except ImportError as error:
        print(f"passages and late chunking skipped: this gtr_keras has no token windows ({error})", file=sys.stderr)
        return None
    return LateChunks, index_passages


def first_window(encoder, corpus, args):
    return encoder.encode_documents(corpus.joined(), batch_size=args.batch_size), None


def window_rows(encoder, corpus, value, windows):
    """`(rows, spans, starts)`: the window rows of `--passages value` (`window_corpus`), each row's `(doc_id, start,
    end)` and each document's first row (a document's rows are contiguous)."""
    rows, _ = windows[1].window_corpus(corpus, encoder, value)
    spans = [windows[1].split_row_id(row) for row in rows.ids]
    starts = np.flatnonzero([i == 0 or spans[i][0] != spans[i - 1][0] for i in range(len(spans))])
    return rows, spans, starts


def passages(encoder, corpus, args, value, windows):
    rows, _, starts = window_rows(encoder, corpus, value, windows)
    return encoder.encode_documents(rows.joined(), batch_size=args.batch_size), starts


def late_chunks(encoder, corpus, args, value, windows):
    _, spans, starts = window_rows(encoder, corpus, value, windows)
    ends = [*starts[1:], len(spans)]
    by_document = [[(start, end) for _, start, end in spans[first:last]] for first, last in zip(starts, ends)]
    late = windows[0](encoder, args.document_length)
    return late.encode(corpus.titles, corpus.texts, by_document, args.late_batch_size), starts


def configurations(args, windows):
    """`{name: embed(encoder, corpus, args)}`: the ways of embedding documents this gtr_keras has."""
    result = {"first window": first_window}
    if windows is None:
        return result
    for value in args.passages:
        result[f"passages {value}"] = lambda e, c, a, v=value: passages(e, c, a, v, windows)
    name = f"late chunking {args.late_chunking}, {args.document_length} tokens"
    result[name] = lambda e, c, a: late_chunks(e, c, a, args.late_chunking, windows)
    return result


def measure(args, encoder, name, embed_by_config):
    corpus, queries, qrels = load_subset(os.path.join(args.data, name), args.max_docs, args.max_queries)
    query_vectors = encoder.encode_queries(list(queries.values()), batch_size=args.batch_size)
    rows = []
    for config, embed in embed_by_config.items():
        start = time.perf_counter()
        vectors, starts = embed(encoder, corpus, args)
        seconds = time.perf_counter() - start
        run = run_of(scores_of(query_vectors, vectors, starts), list(queries), corpus.ids)
        ndcg, recall = metrics_of(qrels, run)
        rows.append(f"| {name} | {config} | {len(vectors):,} | {seconds:,.1f} | {ndcg:.4f} | {recall:.4f} |")
        print(rows[-1], flush=True)
    return f"{name}: {len(corpus):,} documents, {len(queries):,} queries", rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataset_arguments(parser)
    parser.add_argument("--model", default=BUNDLED_MODEL_DIR)
    parser.add_argument("--passages", nargs="+", default=["64:32", "127:64"], help="window settings T:S")
    parser.add_argument("--late-chunking", default="64:32", help="the windows pooled, T:S")
    parser.add_argument("--document-length", type=int, default=2048, help="tokens of late chunking's forward pass")
    parser.add_argument("--late-batch-size", type=int, default=4, help="documents a late-chunking forward pass")
    parser.set_defaults(section=SECTION)
    args = parse_arguments(parser, argv)
    encoder = load(args.model)
    embed_by_config = configurations(args, windowing())
    start, sizes, rows = started(), [], []
    for name in args.datasets:
        size, dataset_rows = measure(args, encoder, name, embed_by_config)
        sizes.append(size)
        rows += dataset_rows
    table = [
        "| dataset | documents as | rows | encode s | NDCG@10 | Recall@100 |",
        "|---|---|---:|---:|---:|---:|",
        *rows,
    ]
    facts = (
        f"Model document budget {encoder.document_length} tokens; {'; '.join(sizes)}; exact search, MaxP over windows."
    )
    report(__file__, argv, args, os.path.basename(os.path.normpath(args.model)), start, facts, table)


if __name__ == "__main__":
    main()
