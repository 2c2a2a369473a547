"""What the handlers of several commands load from their flags: the `--model` encoder, the `--fusion`, the
`--rerank` reranker (its source checked before any model loads)."""

import sys

from gtr_keras.cli.helpers.flag_types import PROG
from gtr_keras.errors import UserError
from gtr_keras.utils.cpu import bfloat16_note


def encoder(args):
    """The `--model` encoder, with the `add_encoder_arguments` settings and `--dimensions` where the sub-command
    has them (N checked against the model's D: one line, before any work)."""
    from gtr_keras.saving import load_model

    # float32 loads the model as saved; bfloat16 keeps the weights in bfloat16 too (the arithmetic of
    # "mixed_bfloat16" without casting every weight on every call).
    dtype = "bfloat16" if getattr(args, "precision", "float32") == "bfloat16" else None
    note = dtype and bfloat16_note()
    if note:
        print(f"{PROG} {args.command}: note: {note}", file=sys.stderr)
    encoder = load_model(
        args.model,
        dtype=dtype,
        query_length=getattr(args, "query_length", None),
        document_length=getattr(args, "document_length", None),
    )
    try:
        return encoder.truncated(getattr(args, "dimensions", None))
    except UserError as error:
        raise UserError(f"--{error}") from None


def fusion(args):
    """The `Fusion` of `--fusion` and `--gtr-weight` over the `--model`'s own (`fusion.model_fusion`)."""
    from gtr_keras.lexical.fusion import model_fusion

    return model_fusion(args.model, args.fusion, args.gtr_weight)


def reranker_source(args):
    """The `--rerank` reranker's resolved source (None without one), checked to hold a reranker before any
    model loads (`args.rerank`: a namespace of that alone also serves `export --reranker`)."""
    if not args.rerank:
        return None
    from gtr_keras.models.model_files.model_formats import CROSS_ENCODER, RERANKER_FORMATS
    from gtr_keras.models.model_files.model_source import HF_PREFIX, resolve_model_source

    source = resolve_model_source(args.rerank, CROSS_ENCODER if args.rerank.startswith(HF_PREFIX) else None)
    if source.format not in RERANKER_FORMATS:
        raise UserError(
            f"--rerank: {args.rerank} is not a reranker (a {source.format} model directory); give a cross-encoder "
            "checkpoint or the model directory `gtr-keras convert` wrote from one"
        )
    return source


def reranker(args, source):
    """The `--rerank` reranker's scorer, in the command's `--precision`."""
    from gtr_keras.saving import load_model

    return load_model(source, dtype="bfloat16" if getattr(args, "precision", "float32") == "bfloat16" else None)
