"""Prints the broad distillation recipe's results as the Markdown of `recipes/RESULTS.md`.

    python recipes/distill_broad/report.py OUT_DIR DATA_DIR [--bundled MODEL_DIR]

Tables: zero-shot NDCG@10 per collection (each stage's student of the best NFCorpus dev validation and of
the last step, the teacher, BM25 and the previously bundled model, whose results `run.sh` writes when
`BUNDLED` is set; rows without results are left out); encoding speed; per stage, the training loss (means
over 500 steps) and the NFCorpus dev validations from the run's TensorBoard logs, and the chosen step;
pieces per word of the student's tokenizer (and, with --bundled, of that model's) on each collection's
first 2,000 documents.
"""

import argparse
import glob
import json
import os

import sentencepiece as spm
from vocab_study import corpus_file, joined, pieces_per_word, records

from gtr_keras import UserError
from gtr_keras.errors import run_script

DATASETS = ("scifact", "nfcorpus", "cranfield", "cisi")
ZERO_SHOT = ("scifact", "cranfield", "cisi")
MODELS = (
    ("best", "student, stage 1, best NFCorpus dev checkpoint"),
    ("last", "student, stage 1, last step"),
    ("best2", "student, stage 2 (documents 256 tokens), best NFCorpus dev checkpoint"),
    ("last2", "student, stage 2, last step"),
    ("teacher", "teacher all-MiniLM-L6-v2"),
    ("bm25", "BM25 (bm25s)"),
    ("bundled", "previous bundled model"),
)
STAGES = (("stage 1", "student"), ("stage 2", "student2"))


def result(out, model, dataset):
    path = os.path.join(out, "results", f"{model}-{dataset}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        record = json.load(f)
    return {**record, **record.get("metrics", {})}  # `gtr-keras evaluate` nests its metrics


def scalars(log_dir):
    import tensorflow as tf

    points = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                points.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
    return points


def tokenizer_file(model_dir):
    candidates = (
        os.path.join(model_dir, "assets", "tokenizer", "vocabulary.spm"),
        os.path.join(model_dir, "spiece.model"),
    )
    found = [path for path in candidates if os.path.exists(path)]
    if not found:
        raise UserError(f"{model_dir}: no SentencePiece model (assets/tokenizer/vocabulary.spm or spiece.model)")
    return found[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("data")
    parser.add_argument("--bundled", help="the previously bundled model's directory (its tokenizer's row)")
    args = parser.parse_args()

    print("| model | " + " | ".join(DATASETS) + " | average (scifact, cranfield, cisi) |")
    print("|---|" + "---:|" * (len(DATASETS) + 1))
    for model, label in MODELS:
        values = {dataset: result(args.out, model, dataset) for dataset in DATASETS}
        if not any(values.values()):
            continue
        cells = [f"{v['ndcg@10']:.4f}" if v else "" for v in values.values()]
        zero_shot = [values[dataset] for dataset in ZERO_SHOT]
        average = f"{sum(v['ndcg@10'] for v in zero_shot) / 3:.4f}" if all(zero_shot) else ""
        print(f"| {label} | " + " | ".join(cells) + f" | {average} |")

    print("\n| model | documents/s encoding: " + ", ".join(DATASETS) + " |\n|---|---|")
    for model, label in MODELS:
        speeds = [result(args.out, model, dataset) for dataset in DATASETS]
        if model != "bm25" and any(speeds):
            print(f"| {label} | " + ", ".join(f"{v['documents_per_second']}" if v else "" for v in speeds) + " |")

    for stage, directory in STAGES:
        if not os.path.isdir(os.path.join(args.out, directory, "logs")):
            continue
        points = scalars(os.path.join(args.out, directory, "logs"))
        loss = points.get("train/loss", {})
        if loss:
            means = [
                sum(v for s, v in loss.items() if end - 500 < s <= end) / sum(end - 500 < s <= end for s in loss)
                for end in range(500, max(loss) + 1, 500)
            ]
            print(
                f"\n{stage}: training loss, mean of the TensorBoard points of each 500 steps: "
                + ", ".join(f"{value:.3f}" for value in means)
            )
        validation = points.get("val/ndcg@10", {})
        if validation:
            print(
                f"{stage}: NFCorpus dev NDCG@10 by step: "
                + ", ".join(f"{step} {value:.4f}" for step, value in sorted(validation.items()))
            )
        chosen = os.path.join(args.out, directory, "best_model", "validation.json")
        if os.path.exists(chosen):
            with open(chosen) as f:
                best = json.load(f)
            print(f"{stage}: best_model is step {best['step']}, NFCorpus dev NDCG@10 {best['ndcg@10']:.4f}")

    dev = {label: result(args.out, model, "nfcorpus-dev") for model, label in MODELS}
    if any(dev.values()):
        print(
            "\nNFCorpus dev NDCG@10 (recipes/distill_cpu/evaluate.py --split dev; the choice of the model to "
            "bundle): " + ", ".join(f"{label} {v['ndcg@10']:.4f}" for label, v in dev.items() if v)
        )

    tokenizers = {"student": tokenizer_file(os.path.join(args.out, "student", "best_model"))}
    if args.bundled:
        tokenizers["bundled"] = tokenizer_file(args.bundled)
    print("\n| tokenizer | pieces per word: " + ", ".join(DATASETS) + " |\n|---|---|")
    for name, path in tokenizers.items():
        processor = spm.SentencePieceProcessor(model_file=path)
        ratios = []
        for dataset in DATASETS:
            texts = [joined(r) for _, r in zip(range(2000), records(corpus_file(os.path.join(args.data, dataset))))]
            ratios.append(f"{pieces_per_word(processor, texts)[0]:.3f}")
        print(f"| {name} ({processor.get_piece_size():,} pieces) | " + ", ".join(ratios) + " |")


if __name__ == "__main__":
    run_script(main)
