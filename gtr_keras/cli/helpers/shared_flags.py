"""The flags several `gtr-keras` commands share, each group added by one function: `add_encoder_arguments`,
`add_dimensions`,
`add_beam_arguments`, `add_retriever_arguments`, `add_rerank_arguments`, `add_update_arguments` (with
`add_deletion_arguments`), `add_batch_size` and `add_progress`."""

import argparse

from gtr_keras.cli.helpers.flag_types import (
    MODEL_HELP,
    at_least_one,
    corpus_source,
    dimensions,
    embedding_source,
    fraction_or_zero,
    input_file,
    passages,
    token_budget,
)

INFERENCE_PRECISIONS = ("float32", "bfloat16")

RETRIEVERS = ("gtr", "bm25", "hybrid")

BEAM_RUNNERS = ("DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner")


def add_beam_arguments(parser, file_rows=True):
    """Adds `--runner`, `--beam-option`, `--large-model` and (`file_rows`: a pipeline that writes embedding
    files) `--file-rows` to a parser.

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
    if file_rows:
        group.add_argument("--file-rows", type=at_least_one, default=50_000, help="documents per embedding file")


def add_dimensions(parser, what="the embeddings"):
    """Adds `--dimensions N`: `what` cut to the first N coordinates of each embedding, renormalised.

    Example:
    >>> parser = argparse.ArgumentParser()
    >>> add_dimensions(parser)
    >>> parser.parse_args(["--dimensions", "256"]).dimensions
    256
    """
    parser.add_argument(
        "--dimensions",
        type=dimensions,
        default=None,
        metavar="N",
        help=f"{what}: the first N coordinates of each embedding, renormalised (1 to D; GTR was not trained "
        "for fewer than D: docs/dimensions.md) (default: all D)",
    )


def add_passages(parser, what):
    """Adds `--passages TOKENS[:STRIDE]` (docs/long-documents.md): `what` it does.

    Example:
    >>> parser = argparse.ArgumentParser()
    >>> add_passages(parser, "checked against the index's")
    >>> parser.parse_args(["--passages", "64:32"]).passages
    (64, 32)
    """
    parser.add_argument(
        "--passages",
        type=passages,
        default=None,
        metavar="TOKENS[:STRIDE]",
        help=f"documents cut into windows of TOKENS of the model's tokens every STRIDE (default TOKENS), searched as "
        f"documents, each hit with the window that scored (docs/long-documents.md): {what} (default: none)",
    )


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


def add_deletion_arguments(parser):
    """`--delete`, `--missing-ok` and `--compact`, of `update`."""
    parser.add_argument(
        "--delete",
        type=input_file,
        metavar="IDS_FILE",
        help="delete these ids (one a line; default: none)",
    )
    parser.add_argument("--missing-ok", action="store_true", help="with --delete: skip ids that are not in the index")
    parser.add_argument(
        "--compact",
        action="store_true",
        help="rewrite the index as one segment (also done past the thresholds of docs/live-indexes.md)",
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
