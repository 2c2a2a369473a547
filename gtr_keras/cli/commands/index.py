"""`gtr-keras index`: a search index built from a corpus (encoded, resumably) or from precomputed embeddings
(`update` changes one in place)."""

import argparse

from gtr_keras.cli.helpers.flag_checks import check_one_source
from gtr_keras.cli.helpers.flag_types import (
    MODEL_HELP,
    at_least_one,
    corpus_source,
    embedding_source,
    output_dir,
    token_budget,
)
from gtr_keras.cli.helpers.shared_flags import (
    add_batch_size,
    add_beam_arguments,
    add_dimensions,
    add_passages,
    add_progress,
)
from gtr_keras.errors import DataError
from gtr_keras.utils import files
from gtr_keras.utils.locks import locks_output

LATE_DOCUMENT_LENGTH = 2048  # --late-chunking's forward pass: T5's relative positions take any length


def add_parser(subparsers, parents):
    """Adds `index` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "index",
        help="encode a corpus, or take precomputed embeddings, and build a search index (resumable)",
        description="With --model and --corpus: encodes the corpus piece by piece (a killed run resumes if nothing it "
        "depends on changed) and writes the index directory at the end. With --embeddings: indexes "
        "embedding files (encode's NAME.npy + NAME.ids.txt, or the Beam pipeline's .npz), checked before "
        "any index work, a chunk at a time (memory: see docs/large-corpora.md).",
        parents=parents,
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
        help="precomputed embedding files instead of --corpus, e.g. 'emb/part-*.npy' (quote the glob), "
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
    add_batch_size(p, "documents")
    p.add_argument("--piece-size", type=at_least_one, default=2048, help="documents per resumable piece")
    add_progress(p)
    add_dimensions(p, "the indexed vectors (recorded: queries are cut the same), or of --embeddings")
    add_passages(p, "one row a window, recorded (with --corpus, --runner too; TOKENS at most the model's budget)")
    p.add_argument(
        "--late-chunking",
        action="store_true",
        help="with --passages: each window's vector pooled from one forward pass of its whole document, up to "
        "--document-length tokens, so that it sees its document's context (docs/late-chunking.md); recorded",
    )
    p.add_argument(
        "--document-length",
        type=token_budget,
        default=None,
        metavar="N",
        help="with --late-chunking: the tokens of a forward pass, at least the model's document budget; a longer "
        f"document is read in overlapping segments of N (default: {LATE_DOCUMENT_LENGTH})",
    )
    add_beam_arguments(p)
    return p


def check(args, parser):
    """`index` takes `--corpus` (with `--model`) or `--embeddings` (with `--bm25-corpus` if any), not both;
    `--rescore` goes with `--vectors int8|binary`, `--passages` with `--corpus`, `--late-chunking` with `--passages`
    and not `--runner`, `--document-length` with `--late-chunking`."""
    if args.rescore is not None and args.vectors == "float32":
        parser.error("argument --rescore: rescores the candidates of --vectors int8|binary")
    check_one_source(args, parser)
    if args.dimensions is not None and args.runner:
        parser.error("argument --dimensions: not with --runner (index the pipeline's embeddings with --dimensions)")
    if args.embeddings is not None and args.runner:
        parser.error("argument --runner: encodes a corpus; --embeddings are encoded already")
    if args.passages is not None and args.embeddings is not None:
        parser.error("argument --passages: cuts the documents of --corpus (not --embeddings)")
    if args.late_chunking and args.passages is None:
        parser.error("argument --late-chunking: pools the windows of --passages (with --corpus, not --runner)")
    if args.late_chunking and args.runner:
        parser.error("argument --late-chunking: not with --runner (the Beam pipeline encodes --passages without it)")
    if args.document_length is not None and not args.late_chunking:
        parser.error("argument --document-length: the tokens of a forward pass of --late-chunking, only with it")
    if args.bm25_corpus is not None and args.embeddings is None:
        parser.error("argument --bm25-corpus: only with --embeddings (--corpus is indexed with BM25 itself)")


@locks_output("args.out")  # before the corpus and the model load: a second run is refused at once
def run(args):
    from gtr_keras.lexical.bm25_side import has_bm25_side
    from gtr_keras.retrieval.index import GLOB_CHARACTERS, Index

    if (
        args.corpus
        and not args.runner
        and any(c in args.corpus for c in GLOB_CHARACTERS)
        and not files.exists(args.corpus)
    ):
        raise DataError(f"{args.corpus}: a glob of corpus files needs --runner (e.g. --runner DirectRunner)")
    index = Index.build(
        args.out,
        args.corpus,
        args.model,
        embeddings=args.embeddings,
        documents=args.bm25_corpus,
        exact=args.exact,
        vectors=args.vectors,
        rescore=args.rescore,
        bm25=args.bm25,
        batch_size=args.batch_size,
        piece_size=args.piece_size,
        progress=args.progress,
        runner=args.runner,
        beam_options=args.beam_option or (),
        large_model=args.large_model,
        file_rows=args.file_rows,
        dimensions=args.dimensions,
        passages=args.passages,
        late_chunking=(args.document_length or LATE_DOCUMENT_LENGTH) if args.late_chunking else None,
    )
    bm25 = "and a BM25 side" if has_bm25_side(args.out) else "no BM25 side"
    vectors = f" over {args.vectors} vectors" if args.vectors != "float32" else ""
    print(f"wrote {args.out}: {len(index)} documents, {index.kind} search{vectors}, {bm25}")
