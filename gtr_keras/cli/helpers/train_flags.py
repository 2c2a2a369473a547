"""The flags of `gtr-keras train` and `gtr-keras distill`: one per `TrainConfig` (or `DistillConfig`) setting.

Each flag's default is the `--config` file's value (or the config class's
default), so that a flag given overrides one setting and nothing else.
"""

from gtr_keras.cli.helpers.flag_types import (
    at_least_one,
    at_least_zero,
    at_least_zero_float,
    dimension_list,
    fraction,
    input_any,
    input_dir,
    input_file,
    output_dir,
    positive_float,
    token_budget,
)

TRAIN_PRECISIONS = ("float32", "bfloat16")
TRAIN_STRATEGIES = ("default", "mirrored", "tpu", "multi-worker")
TRAIN_DATA_FORMATS = ("auto", "jsonl", "beir", "msmarco", "tfrecord")


# (flag, TrainConfig key, argparse type, choices, help with the TrainConfig default)
_LOOP_FLAGS = (  # the training loop's settings, shared by `train` and `distill`
    (
        "--output-dir",
        "output_dir",
        output_dir,
        None,
        "checkpoints, logs and the final model go here; rerun to resume (required unless in --config)",
    ),
    (
        "--tokenizer",
        "tokenizer",
        input_file,
        None,
        "SentencePiece model file (default: the model's; with a preset, one trained on the data)",
    ),
    (
        "--sentencepiece-vocabulary-size",
        "sentencepiece_vocabulary_size",
        at_least_one,
        None,
        "pieces of the SentencePiece model trained for a preset (default: the preset's vocabulary size - 100)",
    ),
    (
        "--case-folding",
        "sentencepiece_case_folding",
        bool,
        None,
        "train that SentencePiece model with NFKC and case folding, so UPPER and lower case read alike "
        "(default: False)",
    ),
    ("--steps", "steps", at_least_one, None, "optimizer steps (default: 1000)"),
    ("--batch-size", "batch_size", at_least_one, None, "global batch size, queries per step (default: 128)"),
    (
        "--learning-rate",
        "learning_rate",
        positive_float,
        None,
        "initial Adafactor learning rate, linear decay to 0 (default: 0.001)",
    ),
    ("--checkpoint-every", "checkpoint_every", at_least_one, None, "steps between checkpoints (default: 1000)"),
    ("--precision", "precision", str, TRAIN_PRECISIONS, "bfloat16 trains with mixed_bfloat16 (default: float32)"),
    (
        "--strategy",
        "strategy",
        str,
        TRAIN_STRATEGIES,
        "distribution strategy: default (one device), mirrored (this machine's GPUs), tpu, or multi-worker (run the "
        "same command on every worker, each with its own TF_CONFIG; the chief writes --output-dir; see "
        "docs/training.md, 'Training on many machines') (default: default)",
    ),
    ("--tpu", "tpu", str, None, "TPU address with --strategy tpu, `local` on a TPU VM (default: none)"),
    (
        "--worker-timeout",
        "worker_timeout",
        at_least_one,
        None,
        "with --strategy multi-worker: seconds to wait for the other workers to start, and for a silent one before "
        "the run ends naming it (default: 120)",
    ),
    ("--seed", "seed", int, None, "seed of initialisation, shuffling and negative sampling (default: 0)"),
    (
        "--steps-per-execution",
        "steps_per_execution",
        at_least_one,
        None,
        "training steps per call into the device (a loop there); must divide --checkpoint-every and --validate-every "
        "(default: 1, or with --strategy tpu the largest divisor of those up to 100)",
    ),
    (
        "--log-every",
        "log_every",
        at_least_one,
        None,
        "steps between TensorBoard points of loss, in-batch accuracy and learning rate (default: 100)",
    ),
    (
        "--validation-data",
        "validation_data",
        input_dir,
        None,
        "small BEIR directory to validate on while training: NDCG@10 and Recall@100 to TensorBoard and the console "
        "(default: none)",
    ),
    ("--validation-split", "validation_split", str, None, "qrels split of --validation-data (default: dev)"),
    (
        "--validate-every",
        "validate_every",
        at_least_one,
        None,
        "steps between validations (default: at each checkpoint)",
    ),
    (
        "--validation-max-queries",
        "validation_max_queries",
        at_least_one,
        None,
        "validate on the first N judged queries only (default: all)",
    ),
    (
        "--keep-best",
        "keep_best",
        bool,
        None,
        "keep the model of the best validation NDCG@10 as the model directory OUT/best_model (default: False)",
    ),
)

TRAIN_FLAGS = (
    (
        "--init",
        "init",
        str,
        None,
        "model directory to fine-tune, or preset name (gtr-tiny, gtr-small, gtr-base, "
        "gtr-large, gtr-xl, gtr-xxl) to train from scratch (required unless in --config)",
    ),
    (
        "--data",
        "data.source",
        input_any,
        None,
        "JSONL/TSV/TFRecord triples file or BEIR directory (required unless in --config)",
    ),
    ("--data-format", "data.format", str, TRAIN_DATA_FORMATS, "format of --data (default: auto, from the path)"),
    ("--split", "data.split", str, None, "qrels split of a BEIR source (default: train)"),
    (
        "--negatives-file",
        "data.negatives_file",
        input_file,
        None,
        "mined-negatives JSONL for a BEIR source (default: none)",
    ),
    ("--num-negatives", "data.num_negatives", at_least_zero, None, "hard negatives per query (default: 1)"),
    ("--query-length", "data.query_length", token_budget, None, "query token budget (default: 64)"),
    ("--document-length", "data.document_length", token_budget, None, "passage token budget (default: 512)"),
    (
        "--train-fraction",
        "data.train_fraction",
        fraction,
        None,
        "fraction of queries to train on, chosen by id hash (default: 1.0)",
    ),
    (
        "--max-positives-per-query",
        "data.max_positives_per_query",
        at_least_one,
        None,
        "examples kept per query id (default: all)",
    ),
    (
        "--grad-cache-chunk-size",
        "grad_cache_chunk_size",
        at_least_one,
        None,
        "GradCache chunk size per replica (default: no GradCache)",
    ),
    ("--temperature", "temperature", positive_float, None, "softmax temperature (default: 0.01)"),
    (
        "--matryoshka-dims",
        "matryoshka_dims",
        dimension_list,
        None,
        "comma-separated N (64,128,256): also train the first N coordinates of each embedding, renormalised, "
        "with the same loss (Matryoshka); recorded in the model, which then serves `--dimensions N` without a "
        "warning (default: none)",
    ),
    *_LOOP_FLAGS,
)

DISTILL_FLAGS = (
    (
        "--teacher",
        "teacher",
        str,
        None,
        "the teacher: a GTR model directory, or a keras-hub TextEmbedder preset directory such as a "
        "sentence-transformers BERT checkpoint (required unless in --config)",
    ),
    (
        "--student",
        "init",
        str,
        None,
        "the student: a model directory, or a preset name (gtr-tiny, gtr-small, ...) "
        "to start from random weights (required unless in --config)",
    ),
    (
        "--texts",
        "data.texts",
        input_file,
        None,
        "files of texts: .txt (a text a line) or .jsonl[.gz] of {query, positive} pairs or {text[, title]} "
        "records (required unless in --config)",
    ),
    ("--query-length", "data.query_length", token_budget, None, "the student's query token budget (default: 64)"),
    (
        "--document-length",
        "data.document_length",
        token_budget,
        None,
        "the student's document token budget (default: 512)",
    ),
    (
        "--temperature",
        "temperature",
        positive_float,
        None,
        "the student's softmax temperature over in-batch scores (default: 0.05)",
    ),
    (
        "--teacher-temperature",
        "teacher_temperature",
        positive_float,
        None,
        "the teacher's softmax temperature over in-batch scores (default: 0.05)",
    ),
    (
        "--mse-weight",
        "mse_weight",
        at_least_zero_float,
        None,
        "weight of the embedding MSE to the teacher's embeddings, through a learned projection when the sizes "
        "differ (default: 0.0)",
    ),
    ("--teacher-batch-size", "teacher_batch_size", at_least_one, None, "texts per teacher pass (default: 64)"),
    (
        "--teacher-piece-size",
        "teacher_piece_size",
        at_least_one,
        None,
        "texts per piece of the resumable teacher-embedding cache (default: 4096)",
    ),
    *_LOOP_FLAGS,
)
_LIST_SETTINGS = ("data.texts",)


def add_train_arguments(parser, flags=TRAIN_FLAGS):
    """Adds `gtr-keras train` (or, with `DISTILL_FLAGS`, `distill`) arguments to a parser.

    `--config FILE` reads a YAML/JSON config; every other flag
    overrides one setting of it (each flag's default is the config's).

    Example:
    >>> parser = argparse.ArgumentParser()
    >>> add_train_arguments(parser)
    >>> vars(parser.parse_args(["--steps", "20", "--strategy", "tpu"]))["strategy"]
    'tpu'
    """
    parser.add_argument(
        "--config", type=input_file, help="YAML or JSON training config; flags override it (default: flags only)"
    )
    for flag, key, kind, choices, help_text in flags:
        if kind is bool:  # a switch; None when absent, so that it does not override --config
            parser.add_argument(flag, dest=key, action="store_const", const=True, help=help_text)
        else:
            metavar = None if choices else flag.removeprefix("--").upper().replace("-", "_")
            parser.add_argument(
                flag,
                dest=key,
                type=kind,
                choices=choices,
                help=help_text,
                metavar=metavar,
                nargs="+" if key in _LIST_SETTINGS else None,
            )
    keys = [key for _, key, _, _, _ in flags]
    if flags is TRAIN_FLAGS:
        parser.add_argument(
            "--reranker",
            metavar="MODEL",
            help="fine-tune this reranker (a cross-encoder checkpoint or the model directory `convert` wrote from "
            "one) instead of a GTR model, with a listwise softmax over each query's positive and --num-negatives "
            "hard negatives; --temperature is that softmax's (default: 1.0); docs/reranking.md (default: none)",
        )
        parser.add_argument(
            "--no-mask-false-negatives",
            dest="mask_false_negatives",
            action="store_const",
            const=False,
            help="do not mask in-batch candidates that share the positive's document id (default: masked)",
        )
        keys.append("mask_false_negatives")
    parser.set_defaults(setting_keys=keys)
