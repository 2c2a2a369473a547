"""Fine-tune GTR on MS MARCO triples (query, positive, hard negative) with `model.fit`, on a TPU.

On a Colab / Cloud TPU VM (the published GTR-Base, global batch 512 over 8 cores, bf16, 100 steps per
call into the TPU, validation on a small BEIR dev set at each checkpoint):

    python recipes/msmarco_tpu/train_msmarco.py \
        --init sentence-transformers/gtr-t5-base --triples gs://BUCKET/triples.train.small.tsv.gz \
        --output-dir gs://BUCKET/gtr-base-msmarco --strategy tpu --tpu local \
        --batch-size 512 --steps 20000 --precision bfloat16 --steps-per-execution 100 \
        --validation-data msmarco-dev-small --keep-best --eval-dataset msmarco-dl19-subset

The same script runs on a CPU with a random `gtr-tiny` (the CI test does this):

    python recipes/msmarco_tpu/train_msmarco.py --init gtr-tiny --triples triples.tsv \
        --output-dir /tmp/msmarco-tiny --steps 4 --batch-size 8

Steps: a sentence-transformers checkpoint (hub id or directory) is converted to a gtr-keras
model directory; `gtr_keras.train` fine-tunes it with the bidirectional in-batch loss,
the global batch's positives and hard negatives as candidates (gathered across TPU cores), Adafactor
with linear decay, checkpoints (rerun the same command to resume), TensorBoard scalars in
OUTPUT_DIR/logs and, with --validation-data, NDCG@10 / Recall@100 on a small BEIR dev set during
training; the model is then evaluated on a BEIR-layout dataset if one is given. TPU runs pad every
batch to the fixed query/passage lengths so XLA compiles one program. Every path may be local or
`gs://...`: files are read and written through `gtr_keras.utils.files` (`tf.io.gfile`).
"""

import argparse
import json
import logging
import os
import sys

from gtr_keras import load, load_dataset, save, train
from gtr_keras.beir import evaluate_run
from gtr_keras.beir.evaluation import format_table
from gtr_keras.models import PRESETS
from gtr_keras.retrieval.runs import gtr_run
from gtr_keras.utils import files


def model_init(init, output_dir):
    """A preset name or model directory (local or `gs://`) as is; a sentence-transformers checkpoint
    (hub id, `hf://` id or directory) converted first, once, to `output_dir/initial_model`."""
    if init in PRESETS or (not init.startswith("hf://") and files.exists(os.path.join(init, "model.weights.h5"))):
        return init
    converted = os.path.join(output_dir, "initial_model")
    if not files.exists(converted):
        hub_id = not init.startswith("hf://") and not files.exists(init)
        save(load("hf://" + init if hub_id else init), converted)
    return converted


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--init",
        default="sentence-transformers/gtr-t5-base",
        help="hub id / sentence-transformers dir / gtr-keras model dir / preset",
    )
    parser.add_argument("--triples", required=True, help="MS MARCO triples TSV[.gz]: query, positive, negative")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--strategy", default="default", choices=["default", "mirrored", "tpu"])
    parser.add_argument("--tpu", default=None, help="TPU address ('local' on a TPU VM, '' on Colab)")
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=512, help="global batch (queries per step)")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--query-length", type=int, default=64)
    parser.add_argument("--document-length", type=int, default=256)
    parser.add_argument("--checkpoint-every", type=int, default=1000)
    parser.add_argument(
        "--steps-per-execution",
        type=int,
        default=None,
        help="steps per call into the device (default: 1, or up to 100 with --strategy tpu)",
    )
    parser.add_argument("--log-every", type=int, default=100, help="steps between TensorBoard points")
    parser.add_argument("--validation-data", help="small BEIR directory to validate on during training")
    parser.add_argument("--validation-split", default="dev")
    parser.add_argument("--validate-every", type=int, default=None, help="default: at each checkpoint")
    parser.add_argument("--validation-max-queries", type=int, default=None)
    parser.add_argument("--keep-best", action="store_true", help="keep the best validated model as best_model")
    parser.add_argument("--eval-dataset", help="BEIR directory to evaluate on afterwards")
    parser.add_argument("--eval-split", default="test")
    args = parser.parse_args(argv)

    files.makedirs(args.output_dir)
    checkpoint_every = min(args.checkpoint_every, args.steps)
    encoder = train(
        {
            "init": model_init(args.init, args.output_dir),
            "output_dir": args.output_dir,
            "data": {
                "source": args.triples,
                "format": "msmarco",
                "num_negatives": 1,
                "query_length": args.query_length,
                "document_length": args.document_length,
            },
            "steps": args.steps,
            "batch_size": args.batch_size,
            "learning_rate": args.learning_rate,
            "precision": args.precision,
            "strategy": args.strategy,
            "tpu": args.tpu,
            "checkpoint_every": checkpoint_every,
            "steps_per_execution": args.steps_per_execution,
            "log_every": args.log_every,
            "validation_data": args.validation_data,
            "validation_split": args.validation_split,
            "validate_every": args.validate_every,
            "validation_max_queries": args.validation_max_queries,
            "keep_best": args.keep_best,
            "verbose": 2,
        }
    )
    print(f"model directory: {os.path.join(args.output_dir, 'model')}")
    if args.eval_dataset:
        corpus, queries, qrels, report = load_dataset(args.eval_dataset, args.eval_split)
        metrics = evaluate_run(qrels, gtr_run(encoder, corpus, queries))
        print(format_table([(args.eval_dataset.rstrip("/").rsplit("/", 1)[-1], metrics)]))
        result = {"dataset": args.eval_dataset, "split": args.eval_split, "metrics": metrics}
        with files.atomic_file(os.path.join(args.output_dir, "eval.json")) as f:
            f.write(json.dumps(result, indent=2).encode("utf-8"))


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stdout, format="%(message)s")
    logging.getLogger("gtr_keras").setLevel(logging.INFO)  # `train`'s validation lines, as `gtr-keras train` shows
    main()
