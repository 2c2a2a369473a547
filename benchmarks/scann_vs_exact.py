"""Real data kept honest: NDCG@10 of a ScaNN index built from embedding files vs exact search.

Encodes a BEIR collection with a model (default: the bundled one) into embedding files in `gtr-keras encode`'s
format, indexes them with `index_embeddings` both as ScaNN (forced, whatever the corpus size) and
exactly, runs the test queries through each, and scores both runs with the project's evaluator
(`pytrec_eval`). Results are printed and appended to the "## Large corpora" section of
`benchmarks/RESULTS.md`.

Usage:
    PYTHONPATH=. python benchmarks/scann_vs_exact.py --dataset ../shared/data/scifact
"""

import argparse
import datetime
import json
import os
import tempfile

import numpy as np
from results import RESULTS, machine, publish, rerun_command

import gtr_keras
from gtr_keras import load_dataset
from gtr_keras.beir import evaluate_run
from gtr_keras.beir.evaluation import cut_run, results_from_scores
from gtr_keras.retrieval.index_building import index_embeddings, index_metadata
from gtr_keras.retrieval.runs import EVALUATION_DEPTH
from gtr_keras.storage.search_index import SearchIndex

SECTION = "## Large corpora"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, help="BEIR directory")
    parser.add_argument("--model", default="gtr_small_distilled_en")
    parser.add_argument("--files", type=int, default=4, help="embedding files the corpus is encoded into")
    parser.add_argument("--results", default=RESULTS, help="markdown file to append to")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args(argv)

    started = datetime.datetime.now(datetime.UTC)
    encoder = gtr_keras.load(args.model)
    corpus, queries, qrels, _ = load_dataset(args.dataset)
    texts = corpus.joined()
    query_ids = list(queries)
    query_embeddings = encoder.encode_queries([queries[q] for q in query_ids])
    rows, documents = [], []
    with tempfile.TemporaryDirectory() as work:
        bounds = np.linspace(0, len(texts), args.files + 1).astype(int)
        record = {"model": index_metadata(encoder, args.model), "kind": "document"}
        for number, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
            base = os.path.join(work, f"part-{number:05d}")
            documents.append(encoder.encode_documents(texts[start:stop]))
            np.save(f"{base}.npy", documents[-1])
            with open(f"{base}.ids.txt", "w", encoding="utf-8") as f:
                f.writelines(f"{i}\n" for i in corpus.ids[start:stop])
            with open(f"{base}.json", "w", encoding="utf-8") as f:
                json.dump({**record, "num_rows": int(stop - start)}, f)
        for kind in ("exact", "scann"):
            directory = os.path.join(work, kind)
            index_embeddings(os.path.join(work, "part-*.npy"), directory, kind=kind)
            index = SearchIndex.load(directory)
            indices, scores = index.search(query_embeddings, EVALUATION_DEPTH + 1)
            run = cut_run(results_from_scores(query_ids, list(index.ids), indices, scores, True), EVALUATION_DEPTH)
            rows.append({"kind": kind, "params": index.params, **evaluate_run(qrels, run)})
    # ScaNN scores int8 vectors: how far its top-10 scores are from the float32 dot products of the same pairs.
    top = indices[:, :10]
    float_scores = np.einsum("qd,qkd->qk", query_embeddings, np.concatenate(documents)[top])
    score_error = float(np.abs(scores[:, :10] - float_scores).max())
    lines = ["| search | NDCG@10 | Recall@100 | MRR@10 |", "|---|---:|---:|---:|"]
    lines += [f"| {r['kind']} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} | {r['mrr@10']:.4f} |" for r in rows]
    difference = rows[1]["ndcg@10"] - rows[0]["ndcg@10"]
    table = "\n".join(lines)
    print(
        table, f"\nNDCG@10 ScaNN - exact: {difference:+.4f}; ScaNN score error (top 10): {score_error:.5f}", flush=True
    )
    dataset = os.path.basename(args.dataset.rstrip("/"))
    block = f"""### {started:%Y-%m-%d %H:%M} UTC: ScaNN from embedding files vs exact search, {dataset}

Command: `{rerun_command(__file__, argv)}`

- Machine: {machine()}. Model: `{args.model}`; the {len(texts):,} documents encoded into {args.files} embedding files in
  `encode`'s format, indexed with `index_embeddings` (ScaNN forced; `scann_params`:
  `{json.dumps(rows[1]["params"])}`) and exactly; {len(query_ids)} test queries; depth {EVALUATION_DEPTH}.
- NDCG@10 ScaNN - exact: **{difference:+.4f}**. Largest |ScaNN score - float32 dot product| over every query's
  top 10 (ScaNN rescores int8 vectors): {score_error:.5f}.

{table}
"""
    publish(block, args.results, SECTION, record_it=not args.no_record)


if __name__ == "__main__":
    main()
