"""Prints the recipe's results as markdown tables (for recipes/RESULTS.md).

python recipes/pretrain_finetune_cpu/report.py runs/pretrain_finetune_cpu
"""

import json
import os
import sys

from gtr_keras.utils import files

DATASETS = ("nfcorpus", "scifact", "cranfield", "cisi")
METRICS = ("ndcg@10", "mrr@10", "recall@100", "recall@1000", "map")


def main(out_dir):
    results = os.path.join(out_dir, "results")

    def metrics(name):
        path = os.path.join(results, f"{name}.json")
        if not files.exists(path):
            return None
        with files.open(path, "r") as f:
            return json.load(f)["metrics"]

    print("| model | dataset | " + " | ".join(METRICS) + " |")
    print("|---|---|" + "---:|" * len(METRICS))
    for model in ("multistage", "bm25", "pretrain_only", "finetune_only", "untrained"):
        for dataset in DATASETS:
            values = metrics(f"{model}-{dataset}")
            if values:
                print(f"| {model} | {dataset} | " + " | ".join(f"{values[m]:.4f}" for m in METRICS) + " |")
    zero_shot = [metrics(f"multistage-{d}") for d in DATASETS[1:]]
    bm25 = [metrics(f"bm25-{d}") for d in DATASETS[1:]]
    if all(zero_shot) and all(bm25):
        print(
            f"\nzero-shot average NDCG@10 (scifact, cranfield, cisi): multistage "
            f"{sum(m['ndcg@10'] for m in zero_shot) / 3:.4f}, BM25 {sum(m['ndcg@10'] for m in bm25) / 3:.4f}"
        )
    with files.open(os.path.join(results, "times.txt"), "r") as f:
        print("\nwall times:\n\n" + "".join(f"- {line}" for line in f))


if __name__ == "__main__":
    main(sys.argv[1])
