"""GTR + BM25 with the bundled model: the fusion chosen on dev splits, then every collection's test split.

    python recipes/hybrid/hybrid.py --data ../shared/data --out runs/hybrid

1. Runs: GTR (exact search, the bundled `gtr_small_distilled_en`) and BM25 (bm25s), 1000 deep, for the dev
   splits (SciFact train, NFCorpus dev) and every test split, cached in OUT/runs/NAME.SPLIT.SIDE.trec (a rerun
   reuses them).
2. Sweep (dev splits only): NDCG@10 and Recall@100 of both fusions over GTR weights; the weight the
   bundled model records (its metadata.json "fusion") is the one that keeps both dev splits at or above BM25.
3. Test: per collection, GTR, BM25, RRF (k=60, equal weights), the model's fusion, and the per-query
   NDCG@10 wins and losses of the model's fusion against BM25.

Tables are printed and written to OUT/sweep.md and OUT/results.md.
"""

import argparse
import os
import subprocess
import time

import numpy as np

from gtr_keras import Fusion, load_dataset
from gtr_keras.beir import evaluate_run, read_trec_run, write_trec_run
from gtr_keras.beir.evaluation import per_query_metrics
from gtr_keras.errors import run_script
from gtr_keras.lexical.fusion import model_fusion
from gtr_keras.models import BUNDLED_MODEL_DIR
from gtr_keras.retrieval.runs import bm25_run, gtr_run
from gtr_keras.storage.search_index import SearchIndex

DEV = {"scifact": "train", "nfcorpus": "dev"}
COLLECTIONS = ("scifact", "nfcorpus", "cranfield", "cisi", "msmarco-dl19-subset")
WEIGHTS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)


def cached_runs(data, out, name, splits, encoder_box):
    """`{split: (gtr run, bm25 run)}` of one collection, encoded once and cached as TREC files."""
    paths = {
        split: [os.path.join(out, "runs", f"{name}.{split}.{side}.trec") for side in ("gtr", "bm25")]
        for split in splits
    }
    index = None
    for split in splits:
        if all(os.path.exists(p) for p in paths[split]):
            continue
        if not encoder_box:
            from gtr_keras import load

            encoder_box.append(load(BUNDLED_MODEL_DIR))
        corpus, queries, _, _ = load_dataset(os.path.join(data, name), split)
        if index is None:
            start = time.perf_counter()
            index = SearchIndex(corpus.ids, encoder_box[0].encode_documents(corpus.joined(), 32, False), "exact")
            print(f"{name}: {len(corpus)} documents encoded in {time.perf_counter() - start:.0f} s", flush=True)
        os.makedirs(os.path.dirname(paths[split][0]), exist_ok=True)
        write_trec_run(paths[split][0], gtr_run(encoder_box[0], corpus, queries, index=index), tag="gtr")
        write_trec_run(paths[split][1], bm25_run(corpus, queries), tag="bm25")
    return {split: tuple(read_trec_run(p) for p in paths[split]) for split in splits}


def cells(metrics):
    return f"{metrics['ndcg@10']:.4f} | {metrics['recall@100']:.4f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join("..", "shared", "data"))
    parser.add_argument("--out", default=os.path.join("runs", "hybrid"))
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    encoder_box = []
    runs = {
        name: cached_runs(args.data, args.out, name, [DEV[name]] if name in DEV else [], encoder_box) for name in DEV
    }

    sweep = ["| dev split | fusion | GTR weight | NDCG@10 | Recall@100 |", "|---|---|---|---|---|"]
    for name, split in DEV.items():
        _, _, qrels, _ = load_dataset(os.path.join(args.data, name), split)
        gtr, bm25 = runs[name][split]
        sweep.append(f"| {name} {split} | GTR alone | | {cells(evaluate_run(qrels, gtr))} |")
        sweep.append(f"| {name} {split} | BM25 alone | | {cells(evaluate_run(qrels, bm25))} |")
        for method in ("weighted", "rrf"):
            for weight in WEIGHTS:
                fused = Fusion(method, weight).fuse_runs(gtr, bm25, 1000)
                sweep.append(f"| {name} {split} | {method} | {weight} | {cells(evaluate_run(qrels, fused))} |")
    sweep = "\n".join(sweep)
    print(sweep)

    fusion = model_fusion(BUNDLED_MODEL_DIR)
    label = f"{fusion.method} {fusion.gtr_weight:g}"
    columns = [f"{run} {metric}" for run in ("GTR", "BM25", "RRF k=60", label) for metric in ("NDCG@10", "R@100")]
    table = [
        f"| collection (test) | queries | {' | '.join(columns)} | {label} vs BM25 (NDCG@10): wins / losses / ties |",
        "|---|---|" + "---|" * (len(columns) + 1),
    ]
    for name in COLLECTIONS:
        gtr, bm25 = cached_runs(args.data, args.out, name, ["test"], encoder_box)["test"]
        _, _, qrels, _ = load_dataset(os.path.join(args.data, name), "test")
        hybrid = fusion.fuse_runs(gtr, bm25, 1000)
        rrf = Fusion("rrf", 0.5).fuse_runs(gtr, bm25, 1000)
        fused, sparse = per_query_metrics(qrels, hybrid), per_query_metrics(qrels, bm25)
        delta = np.array([fused[q]["ndcg@10"] - sparse[q]["ndcg@10"] for q in fused])
        record = f"{(delta > 1e-9).sum()} / {(delta < -1e-9).sum()} / {(abs(delta) <= 1e-9).sum()}"
        row = [cells(evaluate_run(qrels, run)) for run in (gtr, bm25, rrf, hybrid)]
        table.append(f"| {name} | {len(fused)} | {' | '.join(row)} | {record} |")
    table = "\n".join(table)
    print(table)
    header = f"commit {commit}\n\n"
    for file, text in (("sweep.md", sweep), ("results.md", table)):
        with open(os.path.join(args.out, file), "w") as f:
            f.write(header + text + "\n")
    return 0


if __name__ == "__main__":
    run_script(main)
