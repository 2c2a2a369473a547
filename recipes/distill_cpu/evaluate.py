"""Zero-shot evaluation of any model a distillation can use (student, teacher, bundled GTR), with encode speed.

    python recipes/distill_cpu/evaluate.py MODEL DATASET_DIR OUT.json [--split test]

MODEL is anything `gtr_keras.distillation.teachers.load_teacher` loads: a GTR model directory or a keras-hub
`TextEmbedder` preset (e.g. the all-MiniLM-L6-v2 checkpoint directory). Exact search, depth 1000,
metrics by `gtr_keras.beir.evaluation.evaluate_run` (pytrec_eval), the same as `gtr-keras evaluate`.
The JSON holds the metrics and the wall time and speed of encoding the corpus. The dataset is read before
the model is loaded; a bad one ends the script with exit 2 and one line naming the file and line.
"""

import argparse
import json
import time

from gtr_keras import load_dataset
from gtr_keras.beir import evaluate_run
from gtr_keras.distillation import load_teacher
from gtr_keras.errors import run_script
from gtr_keras.retrieval.runs import gtr_run
from gtr_keras.storage.search_index import SearchIndex
from gtr_keras.utils import files


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("dataset")
    parser.add_argument("out")
    parser.add_argument("--split", default="test")
    args = parser.parse_args()
    corpus, queries, qrels, _ = load_dataset(args.dataset, args.split)
    model = load_teacher(args.model)
    began = time.perf_counter()
    documents = model.encode_documents(corpus.joined(), batch_size=64, progress=False)
    encode_seconds = time.perf_counter() - began
    run = gtr_run(model, corpus, queries, index=SearchIndex(corpus.ids, documents, "exact"))
    metrics = evaluate_run(qrels, run)
    result = {
        "model": args.model,
        "dataset": args.dataset,
        "split": args.split,
        **metrics,
        "documents": len(corpus),
        "encode_seconds": round(encode_seconds, 1),
        "documents_per_second": round(len(corpus) / encode_seconds, 1),
    }
    with files.atomic_file(args.out) as f:
        f.write((json.dumps(result, indent=2) + "\n").encode("utf-8"))
    print(
        f"{args.model} {args.dataset}: ndcg@10 {metrics['ndcg@10']:.4f}, {result['documents_per_second']} documents/s"
    )


if __name__ == "__main__":
    run_script(main)
