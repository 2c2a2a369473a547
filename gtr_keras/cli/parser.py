"""The `gtr-keras` argument parser: the sub-commands and their flags.

`build_parser` names, for each sub-command, the handler in
`gtr_keras.cli.commands` that runs it; the flags shared by several
sub-commands are added by `add_encoder_arguments`, `add_beam_arguments`, `add_retriever_arguments` and
`gtr_keras.cli.train_arguments.add_train_arguments`.
"""

import argparse

from gtr_keras.cli.arguments import (
    MODEL_HELP,
    PROG,
    Parser,
    at_least_one,
    at_least_zero,
    corpus_source,
    embedding_source,
    fraction,
    fraction_or_zero,
    index_directory,
    input_any,
    input_dir,
    input_file,
    input_path,
    output_dir,
    output_file,
    output_path,
    port_number,
    search_param,
    seconds,
    text,
    token_budget,
)
from gtr_keras.cli.train_arguments import DISTILL_FLAGS, add_train_arguments
from gtr_keras.exports.export_formats import FORMATS

INFERENCE_PRECISIONS = ("float32", "bfloat16")
RETRIEVERS = ("gtr", "bm25", "hybrid")
EXPORT_FORMATS = tuple(FORMATS)
EXPORT_QUANTIZATIONS = ("int8",)
BEAM_RUNNERS = ("DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner")


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
    group.add_argument(
        "--runner",
        choices=BEAM_RUNNERS,
        default=None,
        help="encode the corpus with an Apache Beam pipeline on this runner (default: none, encode in this process)",
    )
    group.add_argument(
        "--beam-option",
        action="append",
        default=[],
        metavar="KEY[=VALUE]",
        help="Beam pipeline option, e.g. project=my-project, temp_location=gs://b/tmp; repeatable (default: none)",
    )
    group.add_argument(
        "--large-model",
        action="store_true",
        help="one model copy per machine, shared by all worker processes (GTR-XL/XXL)",
    )
    group.add_argument("--shard-rows", type=at_least_one, default=50_000, help="documents per embedding shard file")


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
        "--precision",
        choices=INFERENCE_PRECISIONS,
        default="float32",
        help="bfloat16: weights and arithmetic in bfloat16, float32 embeddings out; faster on CPUs with "
        "AVX512-BF16 or AMX (see benchmarks/RESULTS.md)",
    )
    parser.add_argument(
        "--query-length",
        type=token_budget,
        default=None,
        help="query token budget, EOS included (default: the model's)",
    )
    parser.add_argument(
        "--document-length",
        type=token_budget,
        default=None,
        help="document token budget, EOS included (default: the model's)",
    )


def add_retriever_arguments(parser, bm25):
    """Adds `--retriever gtr|bm25|hybrid` (`bm25` says what BM25 searches), and `--fusion weighted|rrf` and
    `--gtr-weight W`, both defaulting to the model's (`fusion.model_fusion`).

    Example:
    >>> parser = argparse.ArgumentParser()
    >>> add_retriever_arguments(parser, "the bm25s baseline")
    >>> parser.parse_args(["--retriever", "hybrid", "--gtr-weight", "0.3"]).gtr_weight
    0.3
    """
    parser.add_argument("--retriever", choices=RETRIEVERS, default="gtr", help=f"dense GTR, {bm25}, or both fused")
    group = parser.add_argument_group("hybrid retrieval (--retriever hybrid; docs/hybrid.md)")
    group.add_argument(
        "--fusion",
        choices=["weighted", "rrf"],
        default=None,
        help="weighted sum of min-max normalised scores, or reciprocal-rank fusion (default: what the "
        "model's metadata.json records, else weighted)",
    )
    group.add_argument(
        "--gtr-weight",
        type=fraction_or_zero,
        default=None,
        metavar="W",
        help="GTR's share of the fused score, BM25 gets 1 - W (default: the model's, else 0.5)",
    )


def add_rerank_arguments(parser, depth_help):
    """Adds `--rerank MODEL` (a reranker: a cross-encoder checkpoint or the model directory `convert` wrote from
    one) and `--rerank-depth N`.

    Example:
    >>> parser = argparse.ArgumentParser()
    >>> add_rerank_arguments(parser, "first-stage hits reranked per query")
    >>> parser.parse_args(["--rerank", "models/minilm", "--rerank-depth", "50"]).rerank_depth
    50
    """
    group = parser.add_argument_group("reranking (a second stage; docs/reranking.md)")
    group.add_argument(
        "--rerank",
        metavar="MODEL",
        help="rerank the first stage's hits with this reranker: a cross-encoder checkpoint, hf://ORG/NAME, or the "
        "model directory `gtr-keras convert` wrote from one (default: none)",
    )
    group.add_argument("--rerank-depth", type=at_least_one, default=None, metavar="N", help=depth_help)


def add_batch_size(parser, what="texts"):
    parser.add_argument("--batch-size", type=at_least_one, default=32, help=f"{what} per forward pass")


def add_deletion_arguments(parser, prefix=""):
    """`--delete`, `--missing-ok` and `--compact`, of `update` (and of its alias `index --update`)."""
    parser.add_argument(
        "--delete",
        type=input_file,
        metavar="IDS_FILE",
        help=f"{prefix}delete these ids (one a line; default: none)",
    )
    parser.add_argument("--missing-ok", action="store_true", help="with --delete: skip ids that are not in the index")
    parser.add_argument(
        "--compact",
        action="store_true",
        help=f"{prefix}rewrite the index as one segment (also done past the thresholds of docs/live-indexes.md)",
    )


def add_update_arguments(parser):
    """`update`'s sources: `--model` with `--corpus`, or `--embeddings`, and the deletion flags."""
    parser.add_argument(
        "--model",
        help=MODEL_HELP + "; the index's model: required with --corpus, checked with --embeddings (default: none)",
    )
    parser.add_argument(
        "--corpus",
        type=corpus_source,
        help="BEIR directory or corpus.jsonl[.gz] of the documents to add or replace (default: none)",
    )
    parser.add_argument(
        "--embeddings",
        type=embedding_source,
        metavar="GLOB",
        help="precomputed embedding files of the documents to add or replace, e.g. 'emb/part-*.npy' (quote the glob; "
        "default: none)",
    )
    parser.add_argument(
        "--metadata-corpus",
        "--bm25-corpus",
        dest="bm25_corpus",
        type=corpus_source,
        metavar="CORPUS",
        help="with --embeddings: the BEIR directory or corpus.jsonl[.gz] of the embedded documents (the same ids), "
        "stored as --corpus stores them (titles, texts, `metadata`; the BM25 side rebuilt) (default: none: the "
        "documents the embeddings replace lose their texts and metadata)",
    )
    add_deletion_arguments(parser)


def add_progress(parser):
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar (default: on for 5000 texts or more)",
    )


def build_parser():
    """The `gtr-keras` argument parser; `args.handler` names the function of `gtr_keras.cli.commands` to run.

    `parser.commands` maps each sub-command's name to its parser.
    """
    parser = Parser(
        prog=PROG,
        description="GTR dual-encoder retrieval in Keras 3 on TensorFlow: convert, encode, "
        "index, search, evaluate, train, mine, export.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the traceback of any error")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = commands.choices

    def command(name, summary, description=None):
        sub = commands.add_parser(name, help=summary, description=description or summary, parents=[common])
        sub.set_defaults(handler=name.replace("-", "_"))
        return sub

    p = command(
        "convert",
        "import a sentence-transformers GTR or cross-encoder checkpoint, or export a model to one",
        "Reads a sentence-transformers GTR checkpoint (T5 encoder, mean pooling, dense projection) "
        "and writes a gtr-keras model directory (a keras-hub preset); a cross-encoder checkpoint (config.json "
        "naming BertForSequenceClassification or XLMRobertaForSequenceClassification) is written as a reranker's "
        "model directory (docs/reranking.md); with --to sentence-transformers, reads a model directory and writes "
        "the sentence-transformers layout.",
    )
    p.add_argument(
        "source",
        help="checkpoint directory or Hugging Face repo id, e.g. "
        "sentence-transformers/gtr-t5-base; with --to sentence-transformers, " + MODEL_HELP,
    )
    p.add_argument(
        "out_dir", type=output_dir, help="directory to write (replaces only an empty one or one of the kind written)"
    )
    p.add_argument(
        "--to",
        choices=["gtr-keras", "sentence-transformers"],
        default="gtr-keras",
        help="what to write: a gtr-keras model directory, or the sentence-transformers layout "
        "(SentenceTransformer(OUT_DIR) loads it)",
    )
    p.add_argument("--query-length", type=token_budget, default=64, help="query token budget, EOS included")

    p = command(
        "encode",
        "embed texts from a .txt, corpus.jsonl[.gz] or queries.jsonl file",
        "Embeds every text of the input and writes OUTPUT (.npy, float32 [N, D]), OUTPUT.ids.txt "
        "(one id a line; for .txt input, the line numbers) and OUTPUT.json (the model and settings) "
        "together; `index --embeddings` reads them.",
    )
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--input", required=True, type=input_file, help=".txt (a text a line) or .jsonl[.gz] records")
    p.add_argument(
        "--output",
        required=True,
        type=output_path("file", ".npy"),
        help="output .npy (ids go to OUTPUT.ids.txt, the model record to OUTPUT.json)",
    )
    p.add_argument(
        "--kind",
        choices=["query", "document"],
        help="query or document budget (default: query for queries.jsonl, else document)",
    )
    add_batch_size(p)
    add_progress(p)
    add_encoder_arguments(p)

    p = command(
        "index",
        "encode a corpus, or take precomputed embeddings, and build a search index (resumable)",
        "With --model and --corpus: encodes the corpus shard by shard (a killed run resumes if nothing it "
        "depends on changed) and writes the index directory at the end. With --embeddings: indexes "
        "embedding shards (encode's NAME.npy + NAME.ids.txt, or the Beam pipeline's .npz), checked before "
        "any index work, a chunk at a time (memory: see docs/large-corpora.md).",
    )
    p.add_argument(
        "--model",
        help=MODEL_HELP + "; required with --corpus; with --embeddings, declares or checks "
        "their model (default: the model encode recorded, if any)",
    )
    p.add_argument(
        "--corpus",
        type=corpus_source,
        help="BEIR directory or corpus.jsonl[.gz]; with --runner also a glob of such files, e.g. "
        "'gs://b/corpus-*.jsonl.gz' (required unless --embeddings)",
    )
    p.add_argument(
        "--embeddings",
        type=embedding_source,
        metavar="GLOB",
        help="precomputed embedding shards instead of --corpus, e.g. 'emb/part-*.npy' (quote the glob), "
        "in file-name order (default: none)",
    )
    p.add_argument(
        "--out",
        required=True,
        type=output_dir,
        help="index directory to write (replaces only an empty one or an index)",
    )
    p.add_argument("--exact", action="store_true", help="exact brute-force search even for large corpora")
    p.add_argument(
        "--vectors",
        choices=["float32", "int8", "binary"],
        default="float32",
        help="the vectors an exact index searches in memory: int8 (per-dimension calibration) or binary (signs) "
        "codes, their best --rescore candidates rescored with float32 read from disk (implies --exact; "
        "docs/choosing-a-search.md)",
    )
    p.add_argument(
        "--rescore",
        type=at_least_one,
        default=None,
        help="with --vectors int8|binary: candidates rescored per query (default: 20 for int8, 100 for binary)",
    )
    p.add_argument(
        "--bm25",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also index the documents with BM25 (INDEX/bm25/), for `search --retriever bm25|hybrid`; "
        "with --embeddings, needs --bm25-corpus",
    )
    p.add_argument(
        "--bm25-corpus",
        "--metadata-corpus",
        dest="bm25_corpus",
        type=corpus_source,
        metavar="CORPUS",
        help="with --embeddings: the BEIR directory or corpus.jsonl[.gz] of the embedded documents (the same "
        "ids), stored with the index (titles, texts and the `metadata` that --filter searches) and indexed "
        "with BM25 (default: none, no texts, no metadata and no BM25 side)",
    )
    group = p.add_argument_group("updates in place: the alias of `update OUT` (docs/live-indexes.md)")
    group.add_argument(
        "--update",
        action="store_true",
        help="update the index OUT in place, as `update OUT` does: documents of --embeddings or --corpus whose "
        "id is there replace it, the others are added (the model must be the index's)",
    )
    add_deletion_arguments(group, "with --update: ")
    add_batch_size(p, "documents")
    p.add_argument("--shard-size", type=at_least_one, default=2048, help="documents per resumable shard")
    add_progress(p)
    add_beam_arguments(p)

    p = command(
        "update",
        "add, replace or delete documents of an index in place (docs/live-indexes.md)",
        "Documents of --corpus (encoded with --model, the index's) or of --embeddings whose id is in the index "
        "replace it, the others are added; --delete deletes ids; --compact rewrites the index as one segment "
        "(also done past the thresholds of docs/live-indexes.md). Every input is checked before the model "
        "loads; the update is committed whole or not at all, and readers keep the version they loaded. "
        "`index --out INDEX --update ...` is the same command.",
    )
    p.add_argument("index", metavar="INDEX", type=index_directory, help="required: the index directory to update")
    add_update_arguments(p)
    add_batch_size(p, "documents")
    add_progress(p)

    p = command("search", "query an index")
    p.add_argument("queries", nargs="+", type=text, help="query text(s); bytes that are not UTF-8 become U+FFFD")
    p.add_argument(
        "--index",
        required=True,
        type=index_directory,
        action="append",
        help="index directory; repeat it to search shards as one index (merged top k; --retriever gtr)",
    )
    p.add_argument("--model", help="the model the index was built with (checked; required unless --retriever bm25)")
    add_retriever_arguments(p, "the index's BM25 side")
    p.add_argument(
        "-k", type=at_least_one, default=None, help="results per query (default: 10; with --rerank, --rerank-depth)"
    )
    p.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="EXPR",
        help="search only the documents whose metadata match EXPR: 'FIELD = VALUE', '!=', 'FIELD in (A, B)', "
        "'<', '<=', '>', '>=' NUMBER; repeat it to AND clauses (docs/filters.md) (default: none)",
    )
    p.add_argument(
        "--ids-file",
        type=input_file,
        metavar="FILE",
        help="search only the documents whose ids are listed in FILE (one a line), with --filter or alone "
        "(default: none)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--snippet", type=at_least_zero, default=160, help="characters of text shown per hit")
    p.add_argument(
        "--search-param",
        type=search_param,
        action="append",
        metavar="NAME=VALUE",
        help="override a search setting of the index (the one `tune` recorded, or the build's), e.g. "
        "num_leaves_to_search=40, reorder_factor=50 (ScaNN) or rescore=100 (int8|binary); repeatable (default: none)",
    )
    add_rerank_arguments(
        p, "with --rerank: the first stage's top N hits are reranked, and the best k of them shown (default: -k)"
    )

    p = command(
        "tune",
        "measure an index's search settings against exact float32 search; record the fastest that meets a recall",
        "Measures recall@k and queries a second of each search setting (ScaNN: leaves searched, reordering "
        "pool and float32 rescoring pool; int8|binary exact: candidates rescored) against an exact search of "
        "the index's float32 vectors, on half the queries, bisects the fastest that meets --target-recall "
        "between the grid's steps, prints them, records the fastest setting that also meets it on the other "
        "half, held out (INDEX/index/tuned.json: search, export, servers and SearchIndex.load use it), and "
        "draws the recall-QPS curve as a PNG. Exit 2 when no setting meets it held out.",
    )
    p.add_argument("--index", required=True, type=index_directory, help="a local index directory")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--queries",
        type=input_any,
        metavar="PATH",
        help="real queries, held out: float32 [n, D] vectors (.npy, e.g. of `gtr-keras encode`), or a BEIR "
        "queries file or directory (queries.jsonl[.gz]) encoded with --model (default: --sample)",
    )
    group.add_argument(
        "--sample",
        type=at_least_one,
        default=1000,
        help="index rows sampled as queries, each left out of its own answer: document rows, nearer their "
        "neighbours than real queries (default: 1000)",
    )
    p.add_argument(
        "--model",
        help="required with a --queries file of text: the model the index was built with (checked), which encodes "
        "them (default: none)",
    )
    p.add_argument("--target-recall", type=fraction, default=0.95, help="recall@k to meet (default: 0.95)")
    p.add_argument("-k", type=at_least_one, default=10, help="results per query whose recall counts")
    p.add_argument(
        "--plot",
        type=output_path("file", ".png"),
        help="the recall-QPS plot to write (default: INDEX/index/tune-recall-qps.png)",
    )
    p.add_argument(
        "--build",
        action="store_true",
        help="also measure ScaNN builds of half and twice the leaves and AH blocks of 2 and 4 dimensions (trained "
        "on the index's int8 vectors); the build of the fastest setting replaces the index",
    )

    p = command(
        "evaluate",
        "BEIR-style evaluation (NDCG@10, MRR@10, R@100, R@1000, MAP)",
        "Retrieves for every judged query of the split and scores the run with pytrec_eval. As in BEIR, "
        "judged documents missing from the corpus count as misses.",
    )
    p.add_argument(
        "--dataset",
        required=True,
        type=input_dir,
        help="BEIR directory (corpus.jsonl[.gz], queries.jsonl, qrels/SPLIT.tsv)",
    )
    p.add_argument("--model", help=f"{MODEL_HELP} (required with --retriever gtr or hybrid; default: none)")
    p.add_argument("--split", default="test", help="qrels split")
    add_retriever_arguments(p, "the bm25s baseline")
    add_batch_size(p)
    p.add_argument("--run-out", type=output_file, help="also write the run as a TREC run file (default: none)")
    p.add_argument("--output-json", type=output_file, help="also write the metrics as JSON (default: none)")
    p.add_argument(
        "--keep-identical-ids",
        action="store_true",
        help="keep documents whose id equals the query id (BEIR drops them)",
    )
    add_encoder_arguments(p)
    add_rerank_arguments(
        p, "with --rerank: documents of each query's first-stage run reranked (the rest follow below; default: 100)"
    )

    p = command("analyze-lengths", "median words of top-10 vs relevant documents (GTR paper 6.4)")
    p.add_argument("--run", required=True, type=input_file, help="TREC run file")
    p.add_argument("--dataset", required=True, type=input_dir, help="BEIR directory")
    p.add_argument("--split", default="test", help="qrels split")
    p.add_argument("-k", type=at_least_one, default=10, help="top documents per query")

    p = command(
        "train",
        "train or fine-tune with the bidirectional in-batch loss (resumable)",
        "Trains with Adafactor and the bidirectional in-batch softmax loss; rerunning with the same "
        "--output-dir resumes from the last checkpoint if the settings, model and data are unchanged.",
    )
    add_train_arguments(p)

    p = command(
        "distill",
        "distil a teacher into a small GTR student (resumable)",
        "Trains a GTR student to give the teacher's in-batch similarity distributions (KL divergence, "
        "optionally with an embedding MSE) on the --texts; the teacher embeds each text once into a "
        "resumable cache under --output-dir, and the training loop is `train`'s (rerun to resume).",
    )
    add_train_arguments(p, DISTILL_FLAGS)

    p = command("mine", "hard negatives from the model's own retrieval (for `train`)")
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--dataset", required=True, type=input_dir, help="BEIR directory")
    p.add_argument("--split", default="train", help="qrels split")
    p.add_argument("--depth", type=at_least_one, default=100, help="documents retrieved per query")
    p.add_argument("--skip-top", type=at_least_zero, default=0, help="non-positive documents skipped at the top")
    p.add_argument("--per-query", type=at_least_one, default=10, help="negatives kept per query")
    add_batch_size(p)
    add_progress(p)
    p.add_argument(
        "--out", required=True, type=output_file, help='negatives JSONL ({"query_id", "negative_ids"} a line)'
    )
    add_encoder_arguments(p)

    p = command(
        "export",
        "SavedModels for hub.load, Keras 3 TFSMLayer and TF Serving; LiteRT, ONNX and OpenVINO encoders",
        "Writes OUT/encoder/VERSION (strings in, embeddings out) and, with --index, OUT/searcher/VERSION "
        "(strings in, document ids and scores out), replacing both together. --format litert writes "
        "OUT/encoder.tflite (strings in); --format onnx|openvino writes OUT/encoder.onnx or OUT/encoder.xml (token "
        "ids and mask in) with spiece.model and export.json.",
    )
    p.add_argument("--model", help=MODEL_HELP + " (required unless --reranker)")
    p.add_argument(
        "--reranker",
        metavar="MODEL",
        help="export this reranker instead (a cross-encoder checkpoint or its model directory): --format savedmodel "
        "writes OUT/reranker/VERSION (queries and documents in, scores out), onnx writes OUT/reranker.onnx with "
        "tokenizer.json (docs/reranking.md) (default: none)",
    )
    p.add_argument(
        "--out",
        required=True,
        type=output_dir,
        help="export root: writes OUT/encoder/VERSION (and OUT/searcher/VERSION); for litert, onnx and "
        "openvino, the export directory",
    )
    p.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        default="savedmodel",
        help="savedmodel: TF Serving's layout under OUT (strings in); litert: OUT/encoder.tflite (strings in, TF "
        "Text's custom ops); onnx (ONNX Runtime) and openvino: the encoder, token ids and mask in",
    )
    p.add_argument(
        "--quantize",
        choices=EXPORT_QUANTIZATIONS,
        default=None,
        help="with --format onnx: int8 weights (ONNX Runtime's dynamic quantization; default: float32)",
    )
    p.add_argument(
        "--index",
        type=index_directory,
        action="append",
        help="index directory: also export a searcher; repeat it for one searcher over shards (default: none)",
    )
    p.add_argument(
        "--searcher",
        choices=["scann", "scann-int8", "brute-force"],
        default="scann",
        help="scann needs ScaNN's ops in the server and holds the index's float32 vectors to rescore with (4 bytes "
        "a dimension); scann-int8 reorders on ScaNN's int8 copy only (a quarter of the memory; recall@10 against "
        "float32 search stops near 0.97); brute-force runs on stock TF Serving",
    )
    p.add_argument(
        "--version",
        type=at_least_one,
        default=None,
        help="TF Serving version directory (default: the next after those in OUT, 1 for a new OUT; a "
        "version served is never rewritten unless given here)",
    )
    p.add_argument("-k", type=at_least_one, default=10, help="results per query of the searcher's serving_default")
    p.add_argument(
        "--search-param",
        type=search_param,
        action="append",
        metavar="NAME=VALUE",
        help="with --searcher scann|scann-int8: the exported searcher's num_leaves_to_search, reorder_factor or "
        "rescore_factor (scann only) instead of the index's (the one `tune` recorded, or the build's); repeatable "
        "(default: none)",
    )
    p.add_argument(
        "--allow-large-float32",
        action="store_true",
        help="with --searcher scann: hold the index's float32 vectors in the searcher even above 1 GiB (refused "
        "otherwise, --searcher scann-int8 suggested)",
    )
    add_encoder_arguments(p)

    p = command(
        "check",
        "verify an index, a model directory or an export, file by file",
        "Verifies a directory that gtr-keras wrote (an index directory with every segment and its BM25 "
        "side, a search index, a model directory, an export of any format): the SHA-256 of every file against "
        "its checksums.json records (every file recorded, every record there), its structure, every record's "
        "fields, row and id counts, and what a job that did not end left there. Exit 0 with one line when all "
        "is well; exit 2 naming the first damaged file and what is wrong.",
    )
    p.add_argument("path", type=input_path("path"), help="the directory (or .tflite file) to check")
    p.add_argument("--all", action="store_true", help="list every problem, not only the first")

    p = command(
        "serve",
        "embeddings and search over HTTP (OpenAI's /v1/embeddings, /v1/search)",
        "Serves the model's embeddings in OpenAI's /v1/embeddings schema and, with --index, searches of the "
        "index at /v1/search (with --reranker, reranks at /v1/rerank), on uvicorn; requests are encoded "
        "together in batches across clients, and an update of the index is served without a restart "
        "(docs/serving.md). SIGTERM or SIGINT stops it.",
    )
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--index", type=index_directory, help="index directory for /v1/search (default: none)")
    p.add_argument(
        "--reranker",
        metavar="MODEL",
        help="a reranker for /v1/rerank (Cohere's and Jina's schema) and for /v1/search's rerank: a cross-encoder "
        "checkpoint or the model directory `gtr-keras convert` wrote from one; served as its directory's name "
        "(docs/reranking.md) (default: none)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=port_number, default=8000, help="port to listen on (0: a free one, printed)")
    p.add_argument(
        "--served-model-name",
        help="the model's name in requests and /v1/models, with NAME-query and NAME-document "
        "(default: the --model directory's name)",
    )
    group = p.add_argument_group("batching (across requests)")
    add_batch_size(group, "texts (of one or several requests)")
    group.add_argument(
        "--max-wait-ms",
        type=seconds(zero=True, per_second=1000, unit="milliseconds"),
        default=0.0,
        help="how long an idle encoder waits after a request for others to share its batch (0: none; under "
        "load, requests share batches anyway: they queue while it encodes)",
    )
    group.add_argument(
        "--max-queue", type=at_least_one, default=4096, help="texts waiting at most; a request beyond is a 503"
    )
    group.add_argument(
        "--max-batch-tokens",
        type=at_least_one,
        default=None,
        help="bound each batch by padded tokens instead of --batch-size texts, as text-embeddings-inference "
        "does: a forward pass holds at most N padded tokens (and --batch-size texts), texts of like lengths "
        "together; at least the model's document budget (default: batches of --batch-size texts)",
    )
    group = p.add_argument_group("limits")
    group.add_argument("--max-inputs", type=at_least_one, default=2048, help="texts per embedding request")
    group.add_argument("--max-body-bytes", type=at_least_one, default=8 << 20, help="request body size (413 beyond)")
    group.add_argument("--max-queries", type=at_least_one, default=64, help="queries per search request")
    group.add_argument("--max-k", type=at_least_one, default=1000, help="largest k of a search")
    group.add_argument(
        "--request-timeout",
        type=seconds(),
        default=60.0,
        help="seconds a request waits for its embeddings or hits once its body is read (then a 503)",
    )
    group = p.add_argument_group("connections (each is closed past its limit)")
    group.add_argument(
        "--header-timeout",
        type=seconds(),
        default=10.0,
        help="seconds a request's head (request line and headers) may take to arrive, from the connection's "
        "opening or a later request's first byte (then a 408)",
    )
    group.add_argument(
        "--body-timeout",
        type=seconds(),
        default=30.0,
        help="seconds a request's body may take to arrive (then a 408), and an answer may wait for its client "
        "to read any of it",
    )
    group.add_argument(
        "--keep-alive-timeout",
        type=seconds(),
        default=5.0,
        help="seconds an idle keep-alive connection stays open",
    )
    group = p.add_argument_group("live index and stopping")
    group.add_argument(
        "--poll-interval",
        type=seconds(),
        default=2.0,
        help="seconds between looks for a new generation of --index (an update or a rebuild) or a search setting "
        "`tune` recorded",
    )
    group.add_argument(
        "--grace-period",
        type=seconds(zero=True),
        default=30.0,
        help="seconds the requests in flight get to finish after SIGTERM or SIGINT (those unfinished then get a "
        "503); a second signal stops at once",
    )
    group = p.add_argument_group("keys, metrics, traces and logs (docs/serving.md)")
    group.add_argument(
        "--api-key",
        action="append",
        dest="api_keys",
        metavar="KEY",
        help="a key requests must carry (Authorization: Bearer KEY; 401 otherwise), on every path but /health; "
        "repeatable (a key here shows in the process list: prefer --api-keys-file; default: none, no key asked)",
    )
    group.add_argument(
        "--api-keys-file",
        type=input_file,
        metavar="FILE",
        help="a local file of keys, one a line (# comments), read again when it changes: a key rotates "
        "without a restart (default: none)",
    )
    group.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve a --host other than loopback without a key (refused otherwise)",
    )
    group.add_argument(
        "--metrics-port",
        type=port_number,
        help="serve /metrics (Prometheus' text format) on this port only, on --host (default: on --port)",
    )
    group.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="export OpenTelemetry traces there by OTLP over HTTP, e.g. http://collector:4318 (needs the otel "
        "extra; /v1/traces is added to a URL without a path; default: none, no traces)",
    )
    group.add_argument("--access-log", action="store_true", help="log every request on stderr, one line")
    group.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="the access log's lines: text, or a JSON object a line (json turns the access log on)",
    )
    add_encoder_arguments(p)

    p = command("demo", "the main job: index, search, evaluate vs BM25 and export, offline")
    p.add_argument("--out", type=output_dir, default="gtr-demo", help="where the index and exports go")
    p.add_argument("--model", default=None, help="model directory or bundled model name (default: gtr-small-distilled)")
    p.add_argument("--dataset", type=input_dir, default=None, help="BEIR directory (default: the bundled Cranfield)")

    command(
        "saved-model-cli",
        "TensorFlow's saved_model_cli with the TF Text and ScaNN ops loaded",
        "Runs TensorFlow's saved_model_cli (all its arguments pass through, e.g. `show --dir D --all`) "
        "after loading the TF Text and ScaNN ops that gtr-keras exports use.",
    )
    return parser
