"""Quantized exact search: NDCG@10 of int8 and binary exact indexes (`index --vectors`) beside float32's.

Encodes each collection's corpus and queries once with the bundled model (cached in `--work`), writes an
exact index of each vector type (and each `--rescore` pool) there, loads it as `gtr-keras search` does
(`SearchIndex.load`: codes in memory, float32 memory-mapped) and scores its top 10 with pytrec_eval, as
`gtr-keras evaluate` does (BEIR's rules: the query's own id left out). The memory column is what a search
holds for the vectors (the codes, or float32's array), per million 768-d vectors.

Usage:
    PYTHONPATH=. python benchmarks/quantized.py --work /tmp/quantized
"""

import argparse
import os
import time

import numpy as np
from results import RESULTS, lscpu_flags, machine, publish, rerun_command

SECTION = "## Quantized exact search"
COLLECTIONS = ("scifact", "nfcorpus", "cranfield")
RESCORE = (10, 20, 40, 100, 200)


def embeddings(work, dataset, data_dir):
    """`(corpus, queries, qrels, document vectors, query vectors)` of one collection, encoded once."""
    from gtr_keras import load_dataset

    corpus, queries, qrels, _ = load_dataset(os.path.join(data_dir, dataset), "test")
    cache = os.path.join(work, f"{dataset}.npz")
    if not os.path.exists(cache):
        import gtr_keras
        from gtr_keras.models import BUNDLED_MODEL_DIR

        encoder = gtr_keras.load(BUNDLED_MODEL_DIR)
        start = time.perf_counter()
        documents = encoder.encode_documents(corpus.joined(), 64, False)
        query_vectors = encoder.encode_queries([queries[q] for q in queries], 64)
        print(f"{dataset}: encoded {len(documents)} documents in {time.perf_counter() - start:.0f} s", flush=True)
        np.savez(cache, documents=documents, queries=query_vectors)
    cached = np.load(cache)
    return corpus, queries, qrels, cached["documents"], cached["queries"]


def ndcg_at_10(index, corpus, queries, qrels, query_vectors):
    from gtr_keras.beir import evaluate_run
    from gtr_keras.beir.evaluation import cut_run, results_from_scores

    indices, scores = index.search(query_vectors, 11)
    run = cut_run(results_from_scores(list(queries), corpus.ids, indices, scores), 10)
    return evaluate_run(qrels, run)["ndcg@10"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, help="directory for the cached embeddings and indexes")
    parser.add_argument("--data", default="/work/shared/data", help="BEIR collections (cranfield: else bundled)")
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    from gtr_keras.storage.quantized_vectors import vector_params
    from gtr_keras.storage.search_index import ArrayRows, SearchIndex, write_search_index

    os.makedirs(args.work, exist_ok=True)
    rows, ratios = [], {}
    for dataset in COLLECTIONS:
        data_dir = args.data if os.path.isdir(os.path.join(args.data, dataset)) else "gtr_keras/assets"
        corpus, queries, qrels, documents, query_vectors = embeddings(args.work, dataset, data_dir)
        settings = [("float32", None)] + [(v, r) for v in ("int8", "binary") for r in RESCORE]
        base = None
        for vectors, rescore in settings:
            directory = os.path.join(args.work, f"{dataset}-{vectors}-{rescore}")
            params = vector_params(vectors, rescore)
            write_search_index(ArrayRows(corpus.ids, documents), directory, "exact", params)
            index = SearchIndex.load(directory)
            start = time.perf_counter()
            ndcg = ndcg_at_10(index, corpus, queries, qrels, query_vectors)
            qps = len(query_vectors) / (time.perf_counter() - start)
            base = ndcg if base is None else base
            held = {"float32": 4 * 768, "int8": 768, "binary": 96}[vectors] * 1_000_000 / 2**20
            ratios[(dataset, vectors, rescore)] = ndcg / base
            rows.append(
                f"| {dataset} | {len(documents)} | {vectors} | {rescore or '-'} | {ndcg:.4f} | "
                f"{100 * ndcg / base:.2f}% | {qps:.0f} | {held:.0f} MiB |"
            )
    best = {
        vectors: min(
            (r for r in RESCORE if all(ratios[(d, vectors, r)] >= need for d in COLLECTIONS)),
            default=None,
        )
        for vectors, need in (("int8", 0.99), ("binary", 0.96))
    }
    flags = lscpu_flags()
    block = "\n".join(
        [
            f"Command: `{rerun_command(__file__, argv)}` (bundled gtr_small_distilled_en; collections from "
            f"{args.data}, Cranfield bundled). Machine: {machine()}; lscpu flags: {flags}",
            "",
            "| collection | documents | vectors | rescore | NDCG@10 | of float32 | QPS (top 10) | held per 1M x 768 |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Smallest rescore pool meeting the targets on all three (int8 >= 99%, binary >= 96% of float32's "
            f"NDCG@10): int8 {best['int8']}, binary {best['binary']}.",
        ]
    )
    publish(block, args.results, SECTION, not args.no_record)


if __name__ == "__main__":
    main()
