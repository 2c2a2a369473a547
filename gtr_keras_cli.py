"""The `gtr-keras` command line: arguments, checks of paths and values, and the error path.

This module imports neither TensorFlow nor the `gtr_keras` package (whose
import loads TensorFlow to register the keras-hub classes), so `--help` and
every mistake in the arguments are answered at once. Only then is the
sub-command's handler in `gtr_keras.cli.commands` imported and run. Path arguments
with a scheme (`gs://...`; not `hf://` model ids) are checked then, through
`tf.io.gfile`, before any work: a scheme TensorFlow has no file system for,
or a missing input, is refused like a bad flag.

Every user error ends the command with exit status 2 and one line naming the
flag, or the file, line and field: argument errors here, the rest as
`gtr_keras.errors.UserError` from the library. Other exceptions are bugs: one
line and exit status 1, or the traceback with `--debug`.
"""

import argparse
import fnmatch
import importlib
import os
import re
import sys

PROG = "gtr-keras"

INFERENCE_PRECISIONS = ("float32", "bfloat16")
BEAM_RUNNERS = ("DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner")
TRAIN_PRECISIONS = ("float32", "bfloat16")
TRAIN_STRATEGIES = ("default", "mirrored", "tpu", "multi-worker")
TRAIN_DATA_FORMATS = ("auto", "jsonl", "beir", "msmarco", "tfrecord")


class _HelpFormatter(argparse.HelpFormatter):
    """Appends `(default: X)` to a flag's help unless the help already says its default."""

    def _get_help_string(self, action):
        text = action.help or ""
        unstated = action.default is None or action.default is False or action.default is argparse.SUPPRESS
        if "default" in text or not action.option_strings or unstated:
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """An `ArgumentParser` that reports a bad argument in one line (exit status 2)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _int_at_least(minimum, why=""):
    """An argparse type: an integer of at least `minimum` (`why` says what the bound is for)."""

    def parse(text):
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}{why}, got {value}")
        return value

    parse.__name__ = "int"  # argparse names the type in "invalid int value: ..."
    return parse


def _positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


_positive_float.__name__ = "float"


def _at_least_zero_float(text):
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value


_at_least_zero_float.__name__ = "float"


def _fraction(text):
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


_fraction.__name__ = "float"

_at_least_one = _int_at_least(1)
_at_least_zero = _int_at_least(0)
_token_budget = _int_at_least(2, " (one token and EOS)")


def _is_remote(path):
    return "://" in path


def _input_path(kind):
    """An argparse type for an input that must exist: `"file"`, `"directory"` or `"path"` (either).

    Paths with a scheme (`gs://...`) are checked by `_check_remote_paths` once TensorFlow is loaded.
    """

    def parse(path):
        if _is_remote(path):
            return path
        if not os.path.exists(path):
            raise argparse.ArgumentTypeError(f"{path}: no such {'file or directory' if kind == 'path' else kind}")
        if kind == "file" and os.path.isdir(path):
            raise argparse.ArgumentTypeError(f"{path}: is a directory, expected a file")
        if kind == "directory" and not os.path.isdir(path):
            raise argparse.ArgumentTypeError(f"{path}: is a file, expected a directory")
        if not os.access(path, os.R_OK):
            raise argparse.ArgumentTypeError(f"{path}: not readable (permission denied)")
        return path

    parse.__name__ = kind
    parse.path_check = ("input", kind)
    return parse


def _output_path(kind, suffix=None):
    """An argparse type for an output `"file"` or `"directory"`, written (or replaced) at the end.

    The path must not be of the other kind, and its nearest existing parent
    must be a writable directory (missing parents are created on writing).
    Paths with a scheme (`gs://...`) are checked by `_check_remote_paths`.
    """

    def parse(path):
        if suffix and not path.endswith(suffix):
            raise argparse.ArgumentTypeError(f"{path}: must end with {suffix}")
        if _is_remote(path):
            return path
        if kind == "file" and os.path.isdir(path):
            raise argparse.ArgumentTypeError(f"{path}: is a directory, expected a file name")
        if kind == "directory" and os.path.exists(path) and not os.path.isdir(path):
            raise argparse.ArgumentTypeError(f"{path}: exists and is not a directory")
        parent = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise argparse.ArgumentTypeError(f"{path}: cannot be created, {parent} is a file")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(f"{path}: cannot be written, {parent} is not writable")
        return path

    parse.__name__ = f"output {kind}"
    parse.path_check = ("output", kind)
    return parse


def _index_directory(path):
    path = _input_path("directory")(path)
    if not _is_remote(path) and not os.path.isfile(os.path.join(path, "retriever.json")):
        raise argparse.ArgumentTypeError(f"{path}: not an index directory (no retriever.json); build one with "
                                         f"`{PROG} index`")
    return path


_index_directory.__name__ = "index directory"
_index_directory.path_check = ("input", "index")

_input_file = _input_path("file")
_input_dir = _input_path("directory")
_input_any = _input_path("path")
_GLOB_CHARACTERS = "*?["


def _corpus_source(path):
    """A BEIR directory or corpus file that must exist, or a glob of corpus files (checked by `index`)."""
    if any(c in path for c in _GLOB_CHARACTERS) and not (not _is_remote(path) and os.path.exists(path)):
        return path
    return _input_any(path)


_corpus_source.__name__ = "corpus"
_corpus_source.path_check = _input_any.path_check
_corpus_source.allows_glob = True


def _embedding_source(path):
    """An embedding file, or a glob of them (matched by `index`)."""
    return _corpus_source(path)


_embedding_source.__name__ = "embeddings"
_embedding_source.path_check = _input_any.path_check
_embedding_source.allows_glob = True
_output_file = _output_path("file")
_output_dir = _output_path("directory")
_MODEL_HELP = ("model directory, sentence-transformers checkpoint, hf://ORG/NAME, a bundled model (gtr-small-distilled) "
               "or a published one by name (gtr-base ... gtr-xxl)")


def add_beam_arguments(parser):
    """Adds `--runner`, `--beam-option`, `--large-model`, `--shard-rows` to a parser.

    `--runner` defaults to None: the caller encodes in-process then.

    Example:
    >>> parser = argparse.ArgumentParser()
    >>> add_beam_arguments(parser)
    >>> parser.parse_args(["--runner", "FlinkRunner", "--beam-option", "parallelism=8"]).beam_option
    ['parallelism=8']
    """
    group = parser.add_argument_group("Apache Beam (scale-out encoding)")
    group.add_argument("--runner", choices=BEAM_RUNNERS, default=None,
                       help="encode the corpus with an Apache Beam pipeline on this runner "
                            "(default: none, encode in this process)")
    group.add_argument("--beam-option", action="append", default=[], metavar="KEY[=VALUE]",
                       help="Beam pipeline option, e.g. project=my-project, temp_location=gs://b/tmp; repeatable "
                            "(default: none)")
    group.add_argument("--large-model", action="store_true",
                       help="one model copy per machine, shared by all worker processes (GTR-XL/XXL)")
    group.add_argument("--shard-rows", type=_at_least_one, default=50_000, help="documents per embedding shard file")


def add_encoder_arguments(parser):
    """Adds `--precision float32|bfloat16` and the token budgets `--query-length`, `--document-length`.

    The budgets default to the model directory's; GTR was trained with 64 and 512.

    Example:
    >>> parser = argparse.ArgumentParser()
    >>> add_encoder_arguments(parser)
    >>> parser.parse_args(["--document-length", "256"]).document_length
    256
    """
    parser.add_argument(
        "--precision", choices=INFERENCE_PRECISIONS, default="float32",
        help="bfloat16: weights and arithmetic in bfloat16, float32 embeddings out; faster on CPUs with "
             "AVX512-BF16 or AMX (see benchmarks/RESULTS.md)",
    )
    parser.add_argument("--query-length", type=_token_budget, default=None,
                        help="query token budget, EOS included (default: the model's)")
    parser.add_argument("--document-length", type=_token_budget, default=None,
                        help="document token budget, EOS included (default: the model's)")


def _add_batch_size(parser, what="texts"):
    parser.add_argument("--batch-size", type=_at_least_one, default=32, help=f"{what} per forward pass")


def _add_progress(parser):
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar (default: on for 5000 texts or more)")


# (flag, TrainConfig key, argparse type, choices, help with the TrainConfig default)
_LOOP_FLAGS = (  # the training loop's settings, shared by `train` and `distill`
    ("--output-dir", "output_dir", _output_dir, None,
     "checkpoints, logs and the final model go here; rerun to resume (required unless in --config)"),
    ("--tokenizer", "tokenizer", _input_file, None,
     "SentencePiece model file (default: the model's; with a preset, one trained on the data)"),
    ("--sentencepiece-vocabulary-size", "sentencepiece_vocabulary_size", _at_least_one, None,
     "pieces of the SentencePiece model trained for a preset (default: the preset's vocabulary size - 100)"),
    ("--case-folding", "sentencepiece_case_folding", bool, None,
     "train that SentencePiece model with NFKC and case folding, so UPPER and lower case read alike "
     "(default: False)"),
    ("--steps", "steps", _at_least_one, None, "optimizer steps (default: 1000)"),
    ("--batch-size", "batch_size", _at_least_one, None, "global batch size, queries per step (default: 128)"),
    ("--learning-rate", "learning_rate", _positive_float, None,
     "initial Adafactor learning rate, linear decay to 0 (default: 0.001)"),
    ("--checkpoint-every", "checkpoint_every", _at_least_one, None, "steps between checkpoints (default: 1000)"),
    ("--precision", "precision", str, TRAIN_PRECISIONS, "bfloat16 trains with mixed_bfloat16 (default: float32)"),
    ("--strategy", "strategy", str, TRAIN_STRATEGIES,
     "distribution strategy: default (one device), mirrored (this machine's GPUs), tpu, or multi-worker (run the "
     "same command on every worker, each with its own TF_CONFIG; the chief writes --output-dir; see README "
     "'Training on many machines') (default: default)"),
    ("--tpu", "tpu", str, None, "TPU address with --strategy tpu, `local` on a TPU VM (default: none)"),
    ("--worker-timeout", "worker_timeout", _at_least_one, None,
     "with --strategy multi-worker: seconds to wait for the other workers to start, and for a silent one before "
     "the run ends naming it (default: 120)"),
    ("--seed", "seed", int, None, "seed of initialisation, shuffling and negative sampling (default: 0)"),
    ("--steps-per-execution", "steps_per_execution", _at_least_one, None,
     "training steps per call into the device (a loop there); must divide --checkpoint-every and --validate-every "
     "(default: 1, or with --strategy tpu the largest divisor of those up to 100)"),
    ("--log-every", "log_every", _at_least_one, None,
     "steps between TensorBoard points of loss, in-batch accuracy and learning rate (default: 100)"),
    ("--validation-data", "validation_data", _input_dir, None,
     "small BEIR directory to validate on while training: NDCG@10 and Recall@100 to TensorBoard and the console "
     "(default: none)"),
    ("--validation-split", "validation_split", str, None, "qrels split of --validation-data (default: dev)"),
    ("--validate-every", "validate_every", _at_least_one, None,
     "steps between validations (default: at each checkpoint)"),
    ("--validation-max-queries", "validation_max_queries", _at_least_one, None,
     "validate on the first N judged queries only (default: all)"),
    ("--keep-best", "keep_best", bool, None,
     "keep the model of the best validation NDCG@10 as the model directory OUT/best_model (default: False)"),
)

TRAIN_FLAGS = (
    ("--init", "init", str, None, "model directory to fine-tune, or preset name (gtr-tiny, gtr-small, gtr-base, "
     "gtr-large, gtr-xl, gtr-xxl) to train from scratch (required unless in --config)"),
    ("--data", "data.source", _input_any, None,
     "JSONL/TSV/TFRecord triples file or BEIR directory (required unless in --config)"),
    ("--data-format", "data.format", str, TRAIN_DATA_FORMATS, "format of --data (default: auto, from the path)"),
    ("--split", "data.split", str, None, "qrels split of a BEIR source (default: train)"),
    ("--negatives-file", "data.negatives_file", _input_file, None,
     "mined-negatives JSONL for a BEIR source (default: none)"),
    ("--num-negatives", "data.num_negatives", _at_least_zero, None, "hard negatives per query (default: 1)"),
    ("--query-length", "data.query_length", _token_budget, None, "query token budget (default: 64)"),
    ("--document-length", "data.document_length", _token_budget, None, "passage token budget (default: 512)"),
    ("--train-fraction", "data.train_fraction", _fraction, None,
     "fraction of queries to train on, chosen by id hash (default: 1.0)"),
    ("--max-positives-per-query", "data.max_positives_per_query", _at_least_one, None,
     "examples kept per query id (default: all)"),
    ("--grad-cache-chunk-size", "grad_cache_chunk_size", _at_least_one, None,
     "GradCache chunk size per replica (default: no GradCache)"),
    ("--temperature", "temperature", _positive_float, None, "softmax temperature (default: 0.01)"),
    *_LOOP_FLAGS,
)

DISTILL_FLAGS = (
    ("--teacher", "teacher", str, None,
     "the teacher: a GTR model directory, or a keras-hub TextEmbedder preset directory such as a "
     "sentence-transformers BERT checkpoint (required unless in --config)"),
    ("--student", "init", str, None, "the student: a model directory, or a preset name (gtr-tiny, gtr-small, ...) "
     "to start from random weights (required unless in --config)"),
    ("--texts", "data.texts", _input_file, None,
     "files of texts: .txt (a text a line) or .jsonl[.gz] of {query, positive} pairs or {text[, title]} "
     "records (required unless in --config)"),
    ("--query-length", "data.query_length", _token_budget, None, "the student's query token budget (default: 64)"),
    ("--document-length", "data.document_length", _token_budget, None,
     "the student's document token budget (default: 512)"),
    ("--temperature", "temperature", _positive_float, None,
     "the student's softmax temperature over in-batch scores (default: 0.05)"),
    ("--teacher-temperature", "teacher_temperature", _positive_float, None,
     "the teacher's softmax temperature over in-batch scores (default: 0.05)"),
    ("--mse-weight", "mse_weight", _at_least_zero_float, None,
     "weight of the embedding MSE to the teacher's embeddings, through a learned projection when the sizes "
     "differ (default: 0.0)"),
    ("--teacher-batch-size", "teacher_batch_size", _at_least_one, None, "texts per teacher pass (default: 64)"),
    ("--teacher-shard-size", "teacher_shard_size", _at_least_one, None,
     "texts per shard of the resumable teacher-embedding cache (default: 4096)"),
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
    parser.add_argument("--config", type=_input_file,
                        help="YAML or JSON training config; flags override it (default: flags only)")
    for flag, key, kind, choices, help_text in flags:
        if kind is bool:  # a switch; None when absent, so that it does not override --config
            parser.add_argument(flag, dest=key, action="store_const", const=True, help=help_text)
        else:
            metavar = None if choices else flag.removeprefix("--").upper().replace("-", "_")
            parser.add_argument(flag, dest=key, type=kind, choices=choices, help=help_text, metavar=metavar,
                                nargs="+" if key in _LIST_SETTINGS else None)
    keys = [key for _, key, _, _, _ in flags]
    if flags is TRAIN_FLAGS:
        parser.add_argument(
            "--no-mask-false-negatives", dest="mask_false_negatives", action="store_const", const=False,
            help="do not mask in-batch candidates that share the positive's document id (default: masked)",
        )
        keys.append("mask_false_negatives")
    parser.set_defaults(setting_keys=keys)


def build_parser():
    """The `gtr-keras` argument parser; `args.handler` names the function of `gtr_keras.cli.commands` to run.

    `parser.commands` maps each sub-command's name to its parser.
    """
    parser = _Parser(prog=PROG, description="GTR dual-encoder retrieval in Keras 3 on TensorFlow: convert, encode, "
                                            "index, search, evaluate, train, mine, export.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the traceback of any error")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = commands.choices

    def command(name, summary, description=None):
        sub = commands.add_parser(name, help=summary, description=description or summary, parents=[common])
        sub.set_defaults(handler=name.replace("-", "_"))
        return sub

    p = command("convert", "import a sentence-transformers GTR checkpoint, or export a model to one",
                "Reads a sentence-transformers GTR checkpoint (T5 encoder, mean pooling, dense projection) "
                "and writes a gtr-keras model directory (a keras-hub preset); with --to sentence-transformers, "
                "reads a model directory and writes the sentence-transformers layout.")
    p.add_argument("source", help="checkpoint directory or Hugging Face repo id, e.g. sentence-transformers/gtr-t5-base; "
                                  "with --to sentence-transformers, " + _MODEL_HELP)
    p.add_argument("out_dir", type=_output_dir, help="directory to write (replaced if it exists)")
    p.add_argument("--to", choices=["gtr-keras", "sentence-transformers"], default="gtr-keras",
                   help="what to write: a gtr-keras model directory, or the sentence-transformers layout "
                        "(SentenceTransformer(OUT_DIR) loads it)")
    p.add_argument("--query-length", type=_token_budget, default=64, help="query token budget, EOS included")

    p = command("migrate", "rewrite a model directory of the first format as a keras-hub preset")
    p.add_argument("source", type=_input_dir, help="model directory with config.json {\"format\": \"gtr-keras\"}")
    p.add_argument("out_dir", type=_output_dir, help="model directory to write (replaced if it exists)")

    p = command("encode", "embed texts from a .txt, corpus.jsonl[.gz] or queries.jsonl file",
                "Embeds every text of the input and writes OUTPUT (.npy, float32 [N, D]), OUTPUT.ids.txt "
                "(one id a line; for .txt input, the line numbers) and OUTPUT.json (the model and settings) "
                "together; `index --embeddings` reads them.")
    p.add_argument("--model", required=True, help=_MODEL_HELP)
    p.add_argument("--input", required=True, type=_input_file, help=".txt (a text a line) or .jsonl[.gz] records")
    p.add_argument("--output", required=True, type=_output_path("file", ".npy"),
                   help="output .npy (ids go to OUTPUT.ids.txt, the model record to OUTPUT.json)")
    p.add_argument("--kind", choices=["query", "document"],
                   help="query or document budget (default: query for queries.jsonl, else document)")
    _add_batch_size(p)
    _add_progress(p)
    add_encoder_arguments(p)

    p = command("index", "encode a corpus, or take precomputed embeddings, and build a search index (resumable)",
                "With --model and --corpus: encodes the corpus shard by shard (a killed run resumes if nothing it "
                "depends on changed) and writes the index directory at the end. With --embeddings: indexes "
                "embedding shards (encode's NAME.npy + NAME.ids.txt, or the Beam pipeline's .npz), checked before "
                "any index work, a chunk at a time (memory: see README, Large corpora).")
    p.add_argument("--model", help=_MODEL_HELP + "; required with --corpus; with --embeddings, declares or checks "
                                                 "their model (default: the model encode recorded, if any)")
    p.add_argument("--corpus", type=_corpus_source,
                   help="BEIR directory or corpus.jsonl[.gz]; with --runner also a glob of such files, e.g. "
                        "'gs://b/corpus-*.jsonl.gz' (required unless --embeddings)")
    p.add_argument("--embeddings", type=_embedding_source, metavar="GLOB",
                   help="precomputed embedding shards instead of --corpus, e.g. 'emb/part-*.npy' (quote the glob), "
                        "in file-name order (default: none)")
    p.add_argument("--out", required=True, type=_output_dir, help="index directory to write (replaced if it exists)")
    p.add_argument("--exact", action="store_true", help="exact brute-force search even for large corpora")
    _add_batch_size(p, "documents")
    p.add_argument("--shard-size", type=_at_least_one, default=2048, help="documents per resumable shard")
    _add_progress(p)
    add_beam_arguments(p)

    p = command("search", "query an index")
    p.add_argument("queries", nargs="+", help="query text(s)")
    p.add_argument("--index", required=True, type=_index_directory, help="index directory")
    p.add_argument("--model", required=True, help="the model the index was built with (checked)")
    p.add_argument("-k", type=_at_least_one, default=10, help="results per query")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--snippet", type=_at_least_zero, default=160, help="characters of text shown per hit")

    p = command("evaluate", "BEIR-style evaluation (NDCG@10, MRR@10, R@100, R@1000, MAP)",
                "Retrieves for every judged query of the split and scores the run with pytrec_eval. As in BEIR, "
                "judged documents missing from the corpus count as misses.")
    p.add_argument("--dataset", required=True, type=_input_dir,
                   help="BEIR directory (corpus.jsonl[.gz], queries.jsonl, qrels/SPLIT.tsv)")
    p.add_argument("--model", help=f"{_MODEL_HELP} (required with --retriever gtr; default: none)")
    p.add_argument("--split", default="test", help="qrels split")
    p.add_argument("--retriever", choices=["gtr", "bm25"], default="gtr", help="dense GTR or the bm25s baseline")
    _add_batch_size(p)
    p.add_argument("--run-out", type=_output_file, help="also write the run as a TREC run file (default: none)")
    p.add_argument("--output-json", type=_output_file, help="also write the metrics as JSON (default: none)")
    p.add_argument("--keep-identical-ids", action="store_true",
                   help="keep documents whose id equals the query id (BEIR drops them)")
    add_encoder_arguments(p)

    p = command("analyze-lengths", "median words of top-10 vs relevant documents (GTR paper 6.4)")
    p.add_argument("--run", required=True, type=_input_file, help="TREC run file")
    p.add_argument("--dataset", required=True, type=_input_dir, help="BEIR directory")
    p.add_argument("--split", default="test", help="qrels split")
    p.add_argument("-k", type=_at_least_one, default=10, help="top documents per query")

    p = command("train", "train or fine-tune with the bidirectional in-batch loss (resumable)",
                "Trains with Adafactor and the bidirectional in-batch softmax loss; rerunning with the same "
                "--output-dir resumes from the last checkpoint if the settings, model and data are unchanged.")
    add_train_arguments(p)

    p = command("distill", "distil a teacher into a small GTR student (resumable)",
                "Trains a GTR student to give the teacher's in-batch similarity distributions (KL divergence, "
                "optionally with an embedding MSE) on the --texts; the teacher embeds each text once into a "
                "resumable cache under --output-dir, and the training loop is `train`'s (rerun to resume).")
    add_train_arguments(p, DISTILL_FLAGS)

    p = command("mine", "hard negatives from the model's own retrieval (for `train`)")
    p.add_argument("--model", required=True, help=_MODEL_HELP)
    p.add_argument("--dataset", required=True, type=_input_dir, help="BEIR directory")
    p.add_argument("--split", default="train", help="qrels split")
    p.add_argument("--depth", type=_at_least_one, default=100, help="documents retrieved per query")
    p.add_argument("--skip-top", type=_at_least_zero, default=0, help="non-positive documents skipped at the top")
    p.add_argument("--per-query", type=_at_least_one, default=10, help="negatives kept per query")
    _add_batch_size(p)
    _add_progress(p)
    p.add_argument("--out", required=True, type=_output_file,
                   help="negatives JSONL ({\"query_id\", \"negative_ids\"} a line)")
    add_encoder_arguments(p)

    p = command("export", "SavedModels for hub.load, Keras 3 TFSMLayer and TF Serving",
                "Writes OUT/encoder/VERSION (strings in, embeddings out) and, with --index, OUT/searcher/VERSION "
                "(strings in, document ids and scores out), replacing both together.")
    p.add_argument("--model", required=True, help=_MODEL_HELP)
    p.add_argument("--out", required=True, type=_output_dir,
                   help="export root: writes OUT/encoder/VERSION (and OUT/searcher/VERSION)")
    p.add_argument("--index", type=_index_directory, help="index directory: also export a searcher (default: none)")
    p.add_argument("--searcher", choices=["scann", "brute-force"], default="scann",
                   help="scann needs ScaNN's ops in the server; brute-force runs on stock TF Serving")
    p.add_argument("--version", type=_at_least_one, default=1, help="TF Serving version directory")
    p.add_argument("-k", type=_at_least_one, default=10, help="results per query of the searcher's serving_default")
    add_encoder_arguments(p)

    p = command("demo", "the main job: index, search, evaluate vs BM25 and export, offline")
    p.add_argument("--out", type=_output_dir, default="gtr-demo", help="where the index and exports go")
    p.add_argument("--model", default=None, help="model directory or bundled model name (default: gtr-small-distilled)")
    p.add_argument("--dataset", type=_input_dir, default=None, help="BEIR directory (default: the bundled Cranfield)")

    command("saved-model-cli", "TensorFlow's saved_model_cli with the TF Text and ScaNN ops loaded",
            "Runs TensorFlow's saved_model_cli (all its arguments pass through, e.g. `show --dir D --all`) "
            "after loading the TF Text and ScaNN ops that gtr-keras exports use.")
    return parser


# Arguments without a path type that name a model: a model directory may be remote (`gs://...`), but
# `hf://ORG/NAME` (and keras-hub's other download ids, `model_source.DOWNLOAD_PREFIXES`) are read by the loader.
_MODEL_DESTS = ("model", "source", "init", "teacher")


def _path_arguments(args, parser, role):
    """`[(flag, path)]` of the parsed arguments that are `role` paths (`"input"` or `"output"`): those of a
    path type, and for inputs the model arguments that name an existing path (not a preset name or hub id)."""
    found = []
    config = _config_settings(args)
    for action in parser._actions:
        value, name = getattr(args, action.dest, None), "/".join(action.option_strings) or action.dest
        if value is None and action.dest in config:
            value, name = config[action.dest], f"{action.dest} of {args.config}"
        check = getattr(action.type, "path_check", None)
        model = role == "input" and action.dest in _MODEL_DESTS
        if value is None or not ((check and check[0] == role) or model):
            continue
        for path in value if isinstance(value, list) else [value]:
            if not isinstance(path, str) or (model and not (_is_remote(path) or os.path.exists(path))):
                continue
            found.append((name, path))
    if role == "output" and args.command == "encode":
        found.append(("--output", f"{os.path.splitext(args.output)[0]}.ids.txt"))
        found.append(("--output", f"{os.path.splitext(args.output)[0]}.json"))
    return found


def _config_settings(args):
    """`{dotted key: value}` of a `train`/`distill` `--config` file (`{}` without one, or for one the library
    will refuse with its file and line), so that its paths are checked like the flags'."""
    if not getattr(args, "config", None) or _is_remote(args.config):
        return {}
    import yaml

    try:
        with open(args.config, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    if not isinstance(config, dict):
        return {}
    flat = {key: value for key, value in config.items() if not isinstance(value, dict)}
    flat.update({f"{key}.{inner}": value for key, value in config.items() if isinstance(value, dict)
                 for inner, value in value.items()})
    return flat


def _check_index_sources(args, parser):
    """`index` takes `--corpus` (with `--model`) or `--embeddings`, not both."""
    if (args.corpus is None) == (args.embeddings is None):
        parser.error("one of the arguments --corpus (with --model) or --embeddings is required, not both")
    if args.corpus is not None and not args.model:
        parser.error("argument --model: required with --corpus")
    if args.embeddings is not None and args.runner:
        parser.error("argument --runner: encodes a corpus; --embeddings are encoded already")


def _comparable(path):
    """`(path, separator)` for comparing paths: local ones absolute with links resolved."""
    if _is_remote(path) and not path.startswith("file://"):
        return path.rstrip("/"), "/"
    return os.path.realpath(path.removeprefix("file://")), os.sep


def _overlap(output, pattern):
    """True when `output` is, contains or lies inside `pattern` (a path, or a glob of corpus files)."""
    (out, sep), (given, _) = _comparable(output), _comparable(pattern)
    if any(c in pattern for c in _GLOB_CHARACTERS) and not os.path.exists(pattern):
        folder = given[: min(given.index(c) for c in _GLOB_CHARACTERS if c in given)].rpartition(sep)[0]
        return fnmatch.fnmatch(out, given) or out == folder or folder.startswith(out + sep)
    return out == given or out.startswith(given + sep) or given.startswith(out + sep)


def _check_outputs(args, parser, standalone):
    """Refuses (exit status 2, before any work) an output that is, contains or lies inside one of the
    command's inputs or another of its outputs, and, when the command is the process (`standalone`), an
    output on `ram://`, which lives only as long as the process that writes it."""
    outputs = _path_arguments(args, parser, "output")
    inputs = _path_arguments(args, parser, "input")
    for number, (flag, path) in enumerate(outputs):
        if standalone and path.startswith("ram://"):
            parser.error(f"argument {flag}: {path}: ram:// lives inside one process only: the output would vanish "
                         f"when {PROG} exits")
        others = [(f"input {name}", given) for name, given in inputs] + [
            (f"output {name}", given) for name, given in outputs[number + 1:]]
        for other, given in others:
            if _overlap(path, given):
                parser.error(f"argument {flag}: {path} overlaps {other} {given} (an output may not be, contain or "
                             "lie inside an input or another output)")


def _remote_path_problem(path, check):
    """What is wrong with remote path argument `path` (`None`: nothing), or a `DataError` for a scheme
    TensorFlow has no file system for. `check` is `("input" | "output" | "model", kind)`."""
    from gtr_keras.utils import files

    role, kind = check
    exists = files.exists(path)  # an unknown scheme raises here
    if role == "input":
        if not exists:
            return f"{path}: no such {'file or directory' if kind in ('path', 'index') else kind}"
        if kind == "file" and files.isdir(path):
            return f"{path}: is a directory, expected a file"
        if kind in ("directory", "index") and not files.isdir(path):
            return f"{path}: is a file, expected a directory"
        if kind == "index" and not files.exists(f"{path.rstrip('/')}/retriever.json"):
            return f"{path}: not an index directory (no retriever.json); build one with `{PROG} index`"
    elif role == "model" and not exists:
        return f"{path}: no such model directory"
    elif role == "output" and exists:
        if kind == "file" and files.isdir(path):
            return f"{path}: is a directory, expected a file name"
        if kind == "directory" and not files.isdir(path):
            return f"{path}: exists and is not a directory"
    return None


def _check_remote_paths(args, parser):
    """Checks the path arguments with a scheme (`gs://...`) the argparse types let through, as they check
    local ones, before the handler does any work; a problem ends the command like a bad flag (exit status 2).

    Needs TensorFlow (`tf.io.gfile`): call it once the handler's module is imported.
    """
    from gtr_keras.errors import DataError

    for action in parser._actions:
        value = getattr(args, action.dest, None)
        if not isinstance(value, str) or not _is_remote(value):
            continue
        check = getattr(action.type, "path_check", None)
        if getattr(action.type, "allows_glob", False) and any(c in value for c in _GLOB_CHARACTERS):
            continue
        if check is None and action.dest in _MODEL_DESTS:
            from gtr_keras.models.gtr.model_source import DOWNLOAD_PREFIXES  # Keras: only for a remote model

            if not value.startswith(DOWNLOAD_PREFIXES):
                check = ("model", "directory")
        if check is None:
            continue
        try:
            problem = _remote_path_problem(value, check)
        except DataError as error:
            problem = str(error)
        if problem:
            name = "/".join(action.option_strings) or action.dest
            parser.error(f"argument {name}: {problem}")


def _resource_problem(error):
    """One line for a TensorFlow error that is the machine's limit rather than a bug (a full disk, a file-size
    limit, memory), naming the file where TensorFlow does; None for anything else."""
    if not type(error).__module__.startswith("tensorflow"):
        return None
    message = _one_line(getattr(error, "message", "") or str(error))
    message = re.sub(r"\s*\[Op:\w+\].*$", "", re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message))
    if type(error).__name__ == "ResourceExhaustedError" and ("OOM" in message or "memory" in message.lower()):
        return f"out of memory ({message[:200]}); lower --batch-size (or the token budgets)"
    if any(limit in message for limit in ("File too large", "No space left on device", "Disk quota exceeded")):
        return message.replace("; ", ": ")
    return None


def _one_line(message):
    """A message on one line: its lines joined with "; " (a library's multi-line error, e.g. huggingface_hub's)."""
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


def _missing_local_model(path):
    """True for a local model path (one with a path separator or a leading dot) that names no directory:
    found here, without TensorFlow's import. A bare name may be a preset's: the library checks it."""
    local = path.removeprefix("file://")
    return "://" not in local and (os.sep in local or local.startswith(".")) and not os.path.isdir(local)


def _run(args, parser):
    model = getattr(args, "model", None)
    if model and _missing_local_model(model):
        print(f"{PROG} {args.command}: error: {model}: no such model directory", file=sys.stderr)
        return 2
    handler = getattr(importlib.import_module("gtr_keras.cli.commands"), args.handler)
    from gtr_keras.errors import UserError

    _check_remote_paths(args, parser)
    try:
        if getattr(args, "model", None):
            from gtr_keras.models.gtr.model_source import resolve_model_source

            args.model = resolve_model_source(args.model)  # once, before the handler reads its inputs
        handler(args)
    except (UserError, OSError) as error:
        if args.debug:
            raise
        print(f"{PROG} {args.command}: error: {_one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a bug: one line, the traceback with --debug; or the machine's limits
        if args.debug:
            raise
        problem = _resource_problem(error)
        if problem:
            print(f"{PROG} {args.command}: error: {problem}", file=sys.stderr)
            return 2
        first_line = (str(error).strip().splitlines() or [""])[0]
        print(f"{PROG} {args.command}: internal error: {type(error).__name__}: {first_line} "
              f"(a bug; rerun with --debug for the traceback and report it)", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    """Runs `gtr-keras` with `argv` (default: `sys.argv[1:]`); returns the exit status."""
    standalone = argv is None  # the command is the process: what it leaves on ram:// dies with it
    argv = sys.argv[1:] if argv is None else list(argv)
    quiet_tensorflow = ("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's C++ start-up lines (CUDA probing, oneDNN)
    if argv[:1] == ["saved-model-cli"]:
        os.environ.setdefault(*quiet_tensorflow)
        from gtr_keras.cli.commands import saved_model_cli

        return saved_model_cli(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "evaluate" and args.retriever == "gtr" and not args.model:
        parser.commands["evaluate"].error("argument --model: required with --retriever gtr")
    if args.command == "index":
        _check_index_sources(args, parser.commands["index"])
    _check_outputs(args, parser.commands[args.command], standalone)
    if not args.debug:
        os.environ.setdefault(*quiet_tensorflow)
    return _run(args, parser.commands[args.command])


if __name__ == "__main__":
    sys.exit(main())
