"""The `gtr-keras` command line.

Each sub-command is a thin shell over the library: argument parsing here, the
work in the module responsible for it. Errors from bad input end the command
with exit status 2 and one line naming the file, line or tensor at fault.
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np

from gtr_keras.corpus import DataError
from gtr_keras.files import atomic_file


def _encoder(args):
    """The `--model` encoder, with the `add_encoder_arguments` settings where the sub-command has them."""
    from gtr_keras.checkpoints import load

    return load(
        args.model, dtype=INFERENCE_PRECISIONS[getattr(args, "precision", "float32")],
        query_length=getattr(args, "query_length", None), document_length=getattr(args, "document_length", None),
    )


def convert(args):
    from gtr_keras.checkpoints import convert_sentence_transformers, save

    embedder = convert_sentence_transformers(args.source, query_length=args.query_length)
    save(embedder, args.out_dir)
    print(
        f"wrote {args.out_dir}: {embedder.backbone.num_layers} layers, d_model {embedder.backbone.hidden_dim}, "
        f"D {embedder.embedding_dim}, {embedder.count_params():,} parameters, "
        f"query length {embedder.query_length}, document length {embedder.document_length}"
    )


def migrate(args):
    from gtr_keras.checkpoints import migrate as migrate_directory

    migrate_directory(args.source, args.out_dir)
    print(f"wrote {args.out_dir} (keras-hub preset directory)")


def encode(args):
    from gtr_keras.corpus import read_texts

    ids, texts = read_texts(args.input)
    kind = args.kind or ("query" if os.path.basename(args.input).startswith("queries.") else "document")
    encoder = _encoder(args)
    embeddings = encoder.encode(texts, kind=kind, batch_size=args.batch_size, progress=args.progress)
    ids_path = f"{os.path.splitext(args.output)[0]}.ids.txt"
    if any("\n" in i or "\r" in i for i in ids):
        raise DataError(f"{args.input}: ids must not contain line breaks (needed for {ids_path})")
    with atomic_file(args.output) as f:
        np.save(f, embeddings)
    with atomic_file(ids_path) as f:
        f.write("".join(f"{i}\n" for i in ids).encode("utf-8"))
    print(f"wrote {args.output} {embeddings.shape} ({kind} encoding, {args.precision}) and {ids_path}")


def index(args):
    from gtr_keras.corpus import load_corpus
    from gtr_keras.retrieval import build_index

    corpus = load_corpus(args.corpus)
    kind = "exact" if args.exact else "auto"
    if args.runner:
        built = _index_with_beam(args, corpus, kind)
    else:
        built = build_index(
            _encoder(args), corpus, args.out, model_dir=args.model, kind=kind,
            batch_size=args.batch_size, shard_size=args.shard_size, progress=args.progress,
        )
    print(f"wrote {args.out}: {len(corpus)} documents, {built.kind} search")


def _index_with_beam(args, corpus, kind):
    """Encodes with an Apache Beam pipeline, then indexes the shards in corpus order."""
    from gtr_keras.beam_pipeline import beam_pipeline_args, encode_corpus_with_beam, index_from_shards
    from gtr_keras.index import SearchIndex
    from gtr_keras.retrieval import index_metadata, work_dir_for, write_index

    shard_dir = work_dir_for(args.out) + "-beam"
    if not os.path.isdir(shard_dir) or not os.listdir(shard_dir):
        encode_corpus_with_beam(
            args.model, args.corpus, shard_dir, runner=args.runner, batch_size=args.batch_size,
            pipeline_args=beam_pipeline_args(args.beam_option), shard_rows=args.shard_rows,
            large_model=args.large_model,
        )
    ids, embeddings = index_from_shards(shard_dir)
    rows = {doc_id: i for i, doc_id in enumerate(ids)}
    if set(rows) != set(corpus.ids):
        raise DataError(f"{shard_dir}: the embedding shards do not hold the ids of {args.corpus}; delete it")
    built = SearchIndex(corpus.ids, embeddings[[rows[i] for i in corpus.ids]], kind=kind)
    write_index(args.out, built, corpus, index_metadata(_encoder(args), args.model))
    shutil.rmtree(shard_dir)
    return built


def search(args):
    from gtr_keras.retrieval import Retriever

    hits = Retriever.load(args.index, _encoder(args)).search(args.queries, args.k)
    if args.json:
        print(json.dumps([{"query": q, "hits": h} for q, h in zip(args.queries, hits)], ensure_ascii=False, indent=2))
        return
    for query, row in zip(args.queries, hits):
        print(f"query: {query}")
        for rank, hit in enumerate(row, start=1):
            snippet = " ".join(hit.get("text", "").split())
            snippet = snippet[: args.snippet] + ("..." if len(snippet) > args.snippet else "")
            print(f"{rank:3d}. [{hit['score']:.4f}] {hit['id']}  {hit.get('title', '')}")
            if snippet:
                print(f"       {snippet}")


def evaluate(args):
    from gtr_keras.evaluation import evaluate_run, format_table, write_trec_run
    from gtr_keras.retrieval import bm25_run, gtr_run, load_dataset

    if args.retriever == "gtr" and not args.model:
        raise DataError("--model is required with --retriever gtr")
    corpus, queries, qrels, report = load_dataset(args.dataset, args.split)
    if not report.ok:
        print(f"warning: {report}", file=sys.stderr)
    ignore = not args.keep_identical_ids
    settings = {}
    if args.retriever == "gtr":
        encoder = _encoder(args)
        settings = {"precision": args.precision, "query_length": encoder.query_length,
                    "document_length": encoder.document_length}
        run = gtr_run(encoder, corpus, queries, batch_size=args.batch_size, ignore_identical_ids=ignore)
    else:
        run = bm25_run(corpus, queries, ignore_identical_ids=ignore)
    metrics = evaluate_run(qrels, run)
    name = os.path.basename(os.path.normpath(args.dataset))
    print(format_table([(f"{name} {args.split} {args.retriever}", metrics)]))
    if args.run_out:
        write_trec_run(args.run_out, run, tag=f"gtr-keras-{args.retriever}")
    if args.output_json:
        result = {"dataset": name, "split": args.split, "retriever": args.retriever, **settings,
                  "metrics": metrics, "num_queries": len(qrels)}
        with atomic_file(args.output_json) as f:
            f.write(json.dumps(result, indent=2).encode("utf-8"))


def analyze_lengths(args):
    from gtr_keras.corpus import load_corpus, load_qrels
    from gtr_keras.evaluation import median_length_analysis, read_trec_run

    result = median_length_analysis(read_trec_run(args.run), load_qrels(args.dataset, args.split),
                                    load_corpus(args.dataset), k=args.k)
    print(json.dumps({"run": args.run, "dataset": args.dataset, **result}, indent=2))


def mine(args):
    from gtr_keras.retrieval import load_dataset, mine_negatives

    corpus, queries, qrels, report = load_dataset(args.dataset, args.split)
    if not report.ok:
        print(f"warning: {report}", file=sys.stderr)
    mined = mine_negatives(_encoder(args), corpus, queries, qrels, args.depth, args.skip_top, args.per_query,
                           args.batch_size, progress=args.progress)
    with atomic_file(args.out) as f:
        for qid, negative_ids in mined.items():
            f.write((json.dumps({"query_id": qid, "negative_ids": negative_ids}) + "\n").encode("utf-8"))
    print(f"wrote {args.out}: {sum(map(len, mined.values()))} negatives for {len(mined)} queries")


def demo(args):
    from gtr_keras.demo import DEMO_DATASET, DEMO_MODEL, run_demo

    run_demo(args.out, args.model or DEMO_MODEL, args.dataset or DEMO_DATASET)


def export(args):
    from gtr_keras.export import export_encoder, export_searcher

    encoder = _encoder(args)
    print(f"wrote {export_encoder(encoder, args.out, args.version)}")
    if args.index:
        print(f"wrote {export_searcher(encoder, args.index, args.out, args.searcher, args.version, args.k)}")


def saved_model_cli(args):
    """TensorFlow's saved_model_cli with the TF Text and ScaNN ops registered."""
    import scann  # noqa: F401
    import tensorflow_text  # noqa: F401
    from tensorflow.python.tools import saved_model_cli as tf_saved_model_cli

    sys.argv = ["saved_model_cli", *args.cli_args]
    tf_saved_model_cli.main()


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
    group.add_argument("--runner", choices=BEAM_RUNNERS, default=None,
                       help="encode the corpus with an Apache Beam pipeline on this runner")
    group.add_argument("--beam-option", action="append", default=[], metavar="KEY[=VALUE]",
                       help="Beam pipeline option, e.g. project=my-project, temp_location=gs://b/tmp; repeatable")
    group.add_argument("--large-model", action="store_true",
                       help="one model copy per machine, shared by all worker processes (GTR-XL/XXL)")
    group.add_argument("--shard-rows", type=int, default=50_000, help="documents per embedding shard file")


# Inference keeps the weights in bfloat16 too: the same arithmetic as "mixed_bfloat16"
# without casting every weight on every call.
INFERENCE_PRECISIONS = {"float32": None, "bfloat16": "bfloat16"}


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
        "--precision", choices=list(INFERENCE_PRECISIONS), default="float32",
        help="bfloat16: weights and arithmetic in bfloat16, float32 embeddings out; faster on CPUs with "
             "AVX512-BF16 or AMX (see benchmarks/RESULTS.md)",
    )
    parser.add_argument("--query-length", type=_token_budget, default=None,
                        help="query token budget, EOS included (default: the model's)")
    parser.add_argument("--document-length", type=_token_budget, default=None,
                        help="document token budget, EOS included (default: the model's)")


def _int_at_least(minimum, why=""):
    """An argparse type: an integer of at least `minimum` (`why` says what the bound is for)."""

    def parse(text):
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}{why}, got {value}")
        return value

    parse.__name__ = "int"  # argparse names the type in "invalid int value: ..."
    return parse


_at_least_one = _int_at_least(1)
_token_budget = _int_at_least(2, " (one token and EOS)")


def build_parser():
    from gtr_keras.training import add_train_arguments, run_train

    parser = argparse.ArgumentParser(prog="gtr-keras", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("convert", help="import a sentence-transformers GTR checkpoint (dir or hub id)")
    p.add_argument("source", help="checkpoint directory or Hugging Face repo id, e.g. sentence-transformers/gtr-t5-base")
    p.add_argument("out_dir", help="model directory to write")
    p.add_argument("--query-length", type=int, default=64, help="query token budget (default 64)")
    p.set_defaults(handler=convert)

    p = commands.add_parser("migrate", help="rewrite a model directory of the first format as a keras-hub preset")
    p.add_argument("source", help="model directory with config.json {\"format\": \"gtr-keras\"}")
    p.add_argument("out_dir", help="model directory to write")
    p.set_defaults(handler=migrate)

    p = commands.add_parser("encode", help="embed texts from a .txt, corpus.jsonl[.gz] or queries.jsonl file")
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument("--input", required=True, help="input file")
    p.add_argument("--output", required=True, help="output .npy (ids go to OUTPUT.ids.txt)")
    p.add_argument("--kind", choices=["query", "document"], help="default: query for queries.jsonl, else document")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar (default: on for inputs of 5000 texts or more)")
    add_encoder_arguments(p)
    p.set_defaults(handler=encode)

    p = commands.add_parser("index", help="encode a corpus and build a search index (resumable)")
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument("--corpus", required=True, help="BEIR directory or corpus.jsonl[.gz]")
    p.add_argument("--out", required=True, help="index directory to write")
    p.add_argument("--exact", action="store_true", help="exact brute-force search even for large corpora")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--shard-size", type=int, default=2048, help="documents per resumable shard")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
    add_beam_arguments(p)
    p.set_defaults(handler=index)

    p = commands.add_parser("search", help="query an index")
    p.add_argument("queries", nargs="+", help="query text(s)")
    p.add_argument("--index", required=True, help="index directory")
    p.add_argument("--model", required=True, help="model directory the index was built with")
    p.add_argument("-k", type=_at_least_one, default=10, help="results per query (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--snippet", type=int, default=160, help="snippet characters")
    p.set_defaults(handler=search)

    p = commands.add_parser("evaluate", help="BEIR-style evaluation (NDCG@10, MRR@10, R@100, R@1000, MAP)")
    p.add_argument("--dataset", required=True, help="BEIR directory (corpus, queries.jsonl, qrels/SPLIT.tsv)")
    p.add_argument("--model", help="model directory (for --retriever gtr)")
    p.add_argument("--split", default="test")
    p.add_argument("--retriever", choices=["gtr", "bm25"], default="gtr")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--run-out", help="write the run as a TREC run file")
    p.add_argument("--output-json", help="write the metrics as JSON")
    p.add_argument("--keep-identical-ids", action="store_true",
                   help="keep documents whose id equals the query id (BEIR drops them)")
    add_encoder_arguments(p)
    p.set_defaults(handler=evaluate)

    p = commands.add_parser("analyze-lengths", help="median words of top-10 vs relevant documents (GTR paper 6.4)")
    p.add_argument("--run", required=True, help="TREC run file")
    p.add_argument("--dataset", required=True, help="BEIR directory")
    p.add_argument("--split", default="test")
    p.add_argument("-k", type=int, default=10)
    p.set_defaults(handler=analyze_lengths)

    p = commands.add_parser("train", help="train or fine-tune with the bidirectional in-batch loss (resumable)")
    add_train_arguments(p)
    p.set_defaults(handler=lambda args: run_train(args))

    p = commands.add_parser("mine", help="hard negatives from the model's own retrieval (for `train`)")
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument("--dataset", required=True, help="BEIR directory")
    p.add_argument("--split", default="train")
    p.add_argument("--depth", type=int, default=100, help="documents retrieved per query")
    p.add_argument("--skip-top", type=int, default=0, help="non-positive documents skipped at the top")
    p.add_argument("--per-query", type=int, default=10, help="negatives kept per query")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--out", required=True, help="negatives JSONL ({\"query_id\", \"negative_ids\"} a line)")
    add_encoder_arguments(p)
    p.set_defaults(handler=mine)

    p = commands.add_parser("export", help="SavedModels for hub.load, Keras 3 TFSMLayer and TF Serving")
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument("--out", required=True, help="export root: writes OUT/encoder/VERSION (and OUT/searcher/VERSION)")
    p.add_argument("--index", help="index directory: also export a searcher")
    p.add_argument("--searcher", choices=["scann", "brute-force"], default="scann",
                   help="scann needs ScaNN's ops in the server; brute-force runs on stock TF Serving")
    p.add_argument("--version", type=int, default=1, help="TF Serving version directory")
    p.add_argument("-k", type=_at_least_one, default=10,
                   help="results per query of the searcher's serving_default (default 10)")
    add_encoder_arguments(p)
    p.set_defaults(handler=export)

    p = commands.add_parser("demo", help="the main job: index, search, evaluate vs BM25 and export, offline")
    p.add_argument("--out", default="gtr-demo", help="where the index and exports go (default ./gtr-demo)")
    p.add_argument("--model", default=None, help="model directory (default: the bundled small GTR)")
    p.add_argument("--dataset", default=None, help="BEIR directory (default: the bundled Cranfield)")
    p.set_defaults(handler=demo)

    p = commands.add_parser("saved-model-cli", add_help=False,
                            help="TensorFlow's saved_model_cli, with the TF Text and ScaNN ops loaded")
    p.add_argument("cli_args", nargs=argparse.REMAINDER)
    p.set_defaults(handler=saved_model_cli)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    from gtr_keras.checkpoints import CheckpointError

    try:
        args.handler(args)
    except (DataError, CheckpointError) as error:
        print(f"gtr-keras {args.command}: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
