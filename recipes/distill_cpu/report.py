"""Prints the distillation recipe's results as the Markdown tables of `recipes/RESULTS.md`.

python recipes/distill_cpu/report.py OUT_DIR
"""

import json
import os
import sys

DATASETS = ("scifact", "nfcorpus", "cranfield", "cisi")
ZERO_SHOT = ("scifact", "cranfield", "cisi")
MODELS = (
    ("student", "distilled student, stage 1"),
    ("student2", "distilled student, stage 2"),
    ("teacher", "teacher all-MiniLM-L6-v2"),
    ("bm25", "BM25 (bm25s)"),
    ("bundled", "previous bundled gtr-small-demo"),
)


def main(out):
    results = os.path.join(out, "results")

    def metrics(model, dataset):
        path = os.path.join(results, f"{model}-{dataset}.json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            record = json.load(f)
        return {**record, **record.get("metrics", {})}  # `gtr-keras evaluate` nests its metrics

    print("| model | " + " | ".join(DATASETS) + " | zero-shot average (scifact, cranfield, cisi) |")
    print("|---|" + "---:|" * (len(DATASETS) + 1))
    for model, label in MODELS:
        values = [metrics(model, dataset) for dataset in DATASETS]
        cells = [f"{v['ndcg@10']:.4f}" if v else "" for v in values]
        zero_shot = [metrics(model, dataset) for dataset in ZERO_SHOT]
        average = f"{sum(v['ndcg@10'] for v in zero_shot) / len(zero_shot):.4f}" if all(zero_shot) else ""
        print(f"| {label} | " + " | ".join(cells) + f" | {average} |")
    print()
    print("| model | documents/s encoding (scifact, nfcorpus, cranfield, cisi) | Cranfield upper-cased NDCG@10 |")
    print("|---|---|---:|")
    for model, label in MODELS:
        speeds = [metrics(model, dataset) for dataset in DATASETS]
        if not all(speeds) or "documents_per_second" not in speeds[0]:
            continue
        upper = metrics(model, "cranfield-upper")
        print(
            f"| {label} | "
            + ", ".join(str(v["documents_per_second"]) for v in speeds)
            + (f" | {upper['ndcg@10']:.4f} |" if upper else " | |")
        )
    times = os.path.join(results, "times.txt")
    if os.path.exists(times):
        print("\nWall times (s):")
        with open(times) as f:
            print("".join(f"- {line}" for line in f))


if __name__ == "__main__":
    main(sys.argv[1])
