"""Filtered search on a real collection: NDCG@10 of GTR, BM25 and hybrid search within a metadata filter,
against the qrels restricted to the documents the filter allows.

The collection's documents get two derived metadata fields: `words`, the number of words of the title and
text, and `length`, `"short"`, `"medium"` or `"long"` by the corpus' terciles of `words`. The corpus is
indexed with `build_index` (`--model`, exact), and each filter is searched with `HybridRetriever.search(...,
filter=...)` at depth 100; the queries without a relevant allowed document are left out of that filter's
mean, as BEIR leaves out queries without a relevant document. Beside it, "post-filter": the unfiltered top 10
with the documents the filter rejects dropped, what one gets by filtering by hand after search.

Usage:
    PYTHONPATH=. python benchmarks/filtered_collection.py --dataset ../../shared/data/scifact
"""

import argparse
import datetime
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
from filtered_search import lscpu_flags
from results import RESULTS, machine, publish, rerun_command

from gtr_keras import load, load_dataset
from gtr_keras.beir import evaluate_run
from gtr_keras.lexical.bm25_side import load_bm25_side
from gtr_keras.lexical.fusion import model_fusion
from gtr_keras.retrieval.hybrid_retriever import RETRIEVERS, HybridRetriever
from gtr_keras.retrieval.index_building import build_index
from gtr_keras.retrieval.retriever import Retriever

SECTION = "## Filtered search"
DEPTH = 100


def derive_metadata(corpus):
    words = [len(text.split()) for text in corpus.joined()]
    low, high = np.percentile(words, [100 / 3, 200 / 3])
    corpus.metadata = [
        {"words": count, "length": "short" if count < low else "medium" if count < high else "long"} for count in words
    ]
    return low, high


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, help="a BEIR directory")
    parser.add_argument("--model", default="gtr_small_distilled_en")
    parser.add_argument("--split", default="test")
    parser.add_argument("--results", default=RESULTS, help="markdown file to append to")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args(argv)

    started = datetime.datetime.now(datetime.UTC)
    corpus, queries, qrels, _ = load_dataset(args.dataset, args.split)
    low, high = derive_metadata(corpus)
    encoder = load(args.model)
    filters = ["length = short", "length in (medium, long)", f"words >= {int(high)}"]
    with tempfile.TemporaryDirectory() as scratch:
        index_dir = os.path.join(scratch, "index")
        build_index(encoder, corpus, index_dir, args.model, kind="exact")
        retriever = Retriever.load(index_dir, encoder)
        hybrid = HybridRetriever(
            retriever, load_bm25_side(index_dir, retriever.index.ids, retriever.corpus), model_fusion(args.model)
        )
        query_ids, texts = list(queries), list(queries.values())
        rows = []
        unfiltered = {}
        for name in RETRIEVERS:
            hits = hybrid.search(texts, DEPTH, name)
            unfiltered[name] = {q: {h["id"]: h["score"] for h in row} for q, row in zip(query_ids, hits)}
            rows.append(("(none)", name, len(qrels), evaluate_run(qrels, unfiltered[name])["ndcg@10"], None))
        for expression in filters:
            allowed = retriever.allowed(expression)
            allowed_ids = {doc_id for doc_id, keep in zip(retriever.index.ids, allowed) if keep}
            filtered_qrels = {q: {d: g for d, g in rels.items() if d in allowed_ids} for q, rels in qrels.items()}
            filtered_qrels = {q: rels for q, rels in filtered_qrels.items() if any(g > 0 for g in rels.values())}
            for name in RETRIEVERS:
                hits = hybrid.search(texts, DEPTH, name, filter=expression)
                run = {q: {h["id"]: h["score"] for h in row} for q, row in zip(query_ids, hits)}
                assert all(h["id"] in allowed_ids for row in hits for h in row)
                post = {
                    q: {d: s for d, s in list(docs.items())[:10] if d in allowed_ids}
                    for q, docs in unfiltered[name].items()
                }
                rows.append(
                    (
                        f"`{expression}` ({allowed.mean():.0%})",
                        name,
                        len(filtered_qrels),
                        evaluate_run(filtered_qrels, run)["ndcg@10"],
                        evaluate_run(filtered_qrels, post)["ndcg@10"],
                    )
                )
                print(rows[-1], flush=True)
    table = ["| filter (documents allowed) | retriever | queries | NDCG@10 filtered | NDCG@10 post-filter |"]
    table.append("|---|---|---:|---:|---:|")
    for expression, name, count, ndcg, post in rows:
        table.append(f"| {expression} | {name} | {count} | {ndcg:.4f} | {'' if post is None else f'{post:.4f}'} |")
    table = "\n".join(table)
    name = os.path.basename(os.path.normpath(args.dataset))
    block = f"""### {started:%Y-%m-%d %H:%M} UTC: {name}, filtered by derived metadata

Command: `{rerun_command(__file__, argv)}`

- Machine: {machine()}. `lscpu` flags: {lscpu_flags()}
- Model `{args.model}`, exact index of the {len(corpus):,} documents, {len(queries)} `{args.split}` queries. Derived
  metadata: `words` (words of title and text) and `length` (`short` below {low:.0f} words, `long` from {high:.0f}:
  the corpus' terciles). Filtered qrels: each query's judgements of allowed documents; queries left without a
  relevant one are not counted ("queries"). Filtered: `HybridRetriever.search(..., filter=EXPR)`, depth {DEPTH};
  post-filter: the unfiltered top 10 less the rejected documents.

{table}
"""
    publish(block, args.results, SECTION, record_it=not args.no_record)


if __name__ == "__main__":
    main()
