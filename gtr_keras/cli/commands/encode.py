"""`gtr-keras encode`: the texts of a file embedded into `OUTPUT.npy`, with their ids and the model's record."""

import json
import os

from gtr_keras.cli.helpers import handler_inputs
from gtr_keras.cli.helpers.flag_types import (
    MODEL_HELP,
    input_file,
    output_path,
)
from gtr_keras.cli.helpers.shared_flags import (
    add_batch_size,
    add_dimensions,
    add_encoder_arguments,
    add_progress,
)
from gtr_keras.errors import DataError
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
        "together; `index --embeddings` reads them.",
        parents=parents,
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
    add_dimensions(p, "OUTPUT's rows")
    return p


@locks_output("args.output")
def run(args):
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
