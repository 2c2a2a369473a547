"""The `gtr-keras` command line.

Each sub-command is a thin shell over the library: argument parsing here, the
work in the module responsible for it. Errors from bad input end the command
with exit status 2 and one line naming the file, line or tensor at fault.
"""

import argparse
import contextlib
import os
import sys

import numpy as np

from gtr_keras.corpus import DataError


def _encoder(args):
    from gtr_keras.checkpoints import load

    return load(args.model)


@contextlib.contextmanager
def _atomic_file(path):
    """A binary file that appears at `path` only once fully written."""
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        with open(temporary, "wb") as f:
            yield f
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def convert(args):
    from gtr_keras.checkpoints import convert_sentence_transformers, save

    encoder = convert_sentence_transformers(args.source, query_length=args.query_length)
    save(encoder, args.out_dir)
    print(
        f"wrote {args.out_dir}: {encoder.model.num_layers} layers, d_model {encoder.model.hidden_dim}, "
        f"D {encoder.embedding_dim}, {encoder.model.count_params():,} parameters, "
        f"query length {encoder.query_length}, document length {encoder.document_length}"
    )


def encode(args):
    from gtr_keras.corpus import read_texts

    ids, texts = read_texts(args.input)
    kind = args.kind or ("query" if os.path.basename(args.input).startswith("queries.") else "document")
    encoder = _encoder(args)
    embeddings = encoder.encode(texts, kind=kind, batch_size=args.batch_size, progress=args.progress)
    ids_path = f"{os.path.splitext(args.output)[0]}.ids.txt"
    if any("\n" in i or "\r" in i for i in ids):
        raise DataError(f"{args.input}: ids must not contain line breaks (needed for {ids_path})")
    with _atomic_file(args.output) as f:
        np.save(f, embeddings)
    with _atomic_file(ids_path) as f:
        f.write("".join(f"{i}\n" for i in ids).encode("utf-8"))
    print(f"wrote {args.output} {embeddings.shape} ({kind} encoding) and {ids_path}")


def build_parser():
    parser = argparse.ArgumentParser(prog="gtr-keras", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("convert", help="import a sentence-transformers GTR checkpoint (dir or hub id)")
    p.add_argument("source", help="checkpoint directory or Hugging Face repo id, e.g. sentence-transformers/gtr-t5-base")
    p.add_argument("out_dir", help="model directory to write")
    p.add_argument("--query-length", type=int, default=64, help="query token budget (default 64)")
    p.set_defaults(run=convert)

    p = commands.add_parser("encode", help="embed texts from a .txt, corpus.jsonl[.gz] or queries.jsonl file")
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument("--input", required=True, help="input file")
    p.add_argument("--output", required=True, help="output .npy (ids go to OUTPUT.ids.txt)")
    p.add_argument("--kind", choices=["query", "document"], help="default: query for queries.jsonl, else document")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar (default: on for inputs of 5000 texts or more)")
    p.set_defaults(run=encode)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    from gtr_keras.checkpoints import CheckpointError

    try:
        args.run(args)
    except (DataError, CheckpointError) as error:
        print(f"gtr-keras {args.command}: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
