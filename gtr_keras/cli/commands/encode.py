"""`gtr-keras encode`: the texts of a file embedded into `OUTPUT.npy`, with their ids and the model's record; or,
with `--to`, a corpus encoded by an Apache Beam pipeline into a Qdrant or Milvus collection
(`retrieval.encoding.engine_pipeline`)."""

import json
import os

from gtr_keras.cli.helpers import handler_inputs
from gtr_keras.cli.helpers.flag_types import (
    MODEL_HELP,
    corpus_source,
    input_file,
    output_path,
)
from gtr_keras.cli.helpers.shared_flags import (
    add_batch_size,
    add_beam_arguments,
    add_dimensions,
    add_encoder_arguments,
    add_progress,
)
from gtr_keras.errors import DataError, UserError
from gtr_keras.utils import files
from gtr_keras.utils.files import atomic_outputs
from gtr_keras.utils.locks import locks_output


def add_parser(subparsers, parents):
    """Adds `encode` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "encode",
        help="embed texts from a .txt, corpus.jsonl[.gz] or queries.jsonl file",
        description="Embeds every text of the input and writes OUTPUT (.npy, float32 [N, D]), OUTPUT.ids.txt "
        "(one id a line; for .txt input, the line numbers) and OUTPUT.json (the model and settings) "
        "together; `index --embeddings` reads them. With --runner, --corpus and --to: encodes the corpus with an "
        "Apache Beam pipeline into a Qdrant or Milvus collection (docs/past-one-machine.md).",
        parents=parents,
    )
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument(
        "--input", type=input_file, help=".txt (a text a line) or .jsonl[.gz] records (required unless --to)"
    )
    p.add_argument(
        "--output",
        type=output_path("file", ".npy"),
        help="output .npy (ids go to OUTPUT.ids.txt, the model record to OUTPUT.json) (required unless --to)",
    )
    engine = p.add_argument_group("into a search engine (with --runner; docs/past-one-machine.md)")
    engine.add_argument(
        "--corpus",
        type=corpus_source,
        help="BEIR directory, corpus.jsonl[.gz] or a glob of such files, e.g. 'corpus-*.jsonl.gz' (required with --to)",
    )
    engine.add_argument(
        "--to",
        metavar="TARGET",
        help="write the corpus's documents and embeddings to this engine: qdrant:PATH, qdrant+http://HOST:PORT, "
        "milvus:PATH.db or milvus+http://HOST:PORT; upserts by id: a rerun leaves one record per document (default: "
        "none, write --output)",
    )
    engine.add_argument("--collection", metavar="NAME", help="the collection --to writes (default: gtr)")
    p.add_argument(
        "--kind",
        choices=["query", "document"],
        help="query or document budget (default: query for queries.jsonl, else document)",
    )
    add_batch_size(p)
    add_progress(p)
    add_encoder_arguments(p)
    add_dimensions(p, "OUTPUT's rows")
    add_beam_arguments(p, file_rows=False)
    return p


def check(args, parser):
    """`encode` takes `--input` and `--output`, or `--runner`, `--corpus` and `--to` (a target `parse_target`
    reads); the flags of one way are refused with the other."""
    from gtr_keras.engines.targets import parse_target

    if args.to is None:
        if args.input is None or args.output is None:
            parser.error("the arguments --input and --output are required (or --runner, --corpus and --to)")
        given = [f for f, v in (("--corpus", args.corpus), ("--collection", args.collection)) if v is not None]
        given += [f for f, v in (("--runner", args.runner), ("--large-model", args.large_model)) if v]
        if given or args.beam_option:
            parser.error(f"argument {(given or ['--beam-option'])[0]}: goes with --to")
        return
    for flag, value in (("--input", args.input), ("--output", args.output), ("--kind", args.kind)):
        if value is not None:
            parser.error(f"argument {flag}: not with --to (which encodes --corpus documents)")
    if args.corpus is None or args.runner is None:
        parser.error("argument --to: needs --corpus and --runner (e.g. --runner DirectRunner)")
    try:
        parse_target(args.to)
    except UserError as error:
        parser.error(f"argument --to: {error}")


@locks_output("args.output")
def run(args):
    if args.to is not None:
        _encode_into_engine(args)
        return
    import numpy as np

    from gtr_keras.beir.text_inputs import read_texts
    from gtr_keras.retrieval.index_building import index_metadata
    from gtr_keras.storage.embedding_files import ids_path_for, model_path_for

    ids_path, record_path = ids_path_for(args.output), model_path_for(args.output)
    for path in (ids_path, record_path):
        if files.isdir(path):
            raise DataError(f"{path}: is a directory, expected a file name (written beside --output)")
        files.remove_staging(path)  # the lock of --output covers the files beside it
    ids, texts = read_texts(args.input)
    kind = args.kind or ("query" if os.path.basename(args.input).startswith("queries.") else "document")
    if any("\n" in i or "\r" in i for i in ids):
        raise DataError(f"{args.input}: ids must not contain line breaks (needed for {ids_path})")
    encoder = handler_inputs.encoder(args)
    embeddings = encoder.encode(texts, kind=kind, batch_size=args.batch_size, progress=args.progress)
    record = {"model": index_metadata(encoder, args.model), "kind": kind, "num_rows": len(ids)}
    with atomic_outputs(args.output, ids_path, record_path) as (npy_path, staged_ids_path, staged_record_path):
        with open(npy_path, "wb") as f:
            np.save(f, embeddings)
        staged_ids_path.write_bytes("".join(f"{i}\n" for i in ids).encode("utf-8"))
        staged_record_path.write_text(json.dumps(record, indent=2), encoding="utf-8")
    print(f"wrote {args.output} {embeddings.shape} ({kind} encoding, {args.precision}), {ids_path} and {record_path}")


def _encode_into_engine(args):
    from gtr_keras.engines.targets import parse_target
    from gtr_keras.retrieval.encoding.engine_pipeline import DEFAULT_COLLECTION, encode_corpus_to_engine

    collection = args.collection or DEFAULT_COLLECTION
    load_model_args = {"dtype": "bfloat16"} if args.precision == "bfloat16" else {}
    if args.document_length is not None:
        load_model_args["document_length"] = args.document_length
    count = encode_corpus_to_engine(
        args.corpus,
        parse_target(args.to),
        args.model,
        lambda: handler_inputs.encoder(args),
        collection,
        runner=args.runner,
        beam_options=args.beam_option,
        batch_size=args.batch_size,
        large_model=args.large_model,
        load_model_args=load_model_args,
    )
    print(f"wrote {count} documents to {args.to}, collection {collection!r} ({args.precision})")
