"""`gtr-keras export`: a model (and an index's searcher) exported as SavedModels, LiteRT, ONNX or OpenVINO, or a
reranker as a SavedModel or ONNX."""

import argparse
import os

from gtr_keras.cli.helpers import handler_inputs
from gtr_keras.cli.helpers.flag_types import (
    MODEL_HELP,
    at_least_one,
    index_directory,
    output_dir,
    search_param,
)
from gtr_keras.cli.helpers.shared_flags import (
    add_dimensions,
    add_encoder_arguments,
)
from gtr_keras.exports.export_formats import FORMATS, missing_package_hint
from gtr_keras.utils.locks import locks_output


def add_parser(subparsers, parents):
    """Adds `export` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "export",
        help="SavedModels for hub.load, Keras 3 TFSMLayer and TF Serving; LiteRT, ONNX and OpenVINO encoders",
        description="Writes OUT/encoder/VERSION (strings in, embeddings out) and, with --index, OUT/searcher/VERSION "
        "(strings in, document ids and scores out), replacing both together. --format litert writes "
        "OUT/encoder.tflite (strings in); --format onnx|openvino writes OUT/encoder.onnx or OUT/encoder.xml (token "
        "ids and mask in) with spiece.model and export.json.",
        parents=parents,
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
    add_dimensions(p, "the encoder's output, in its graph (any format; a searcher uses its index's)")
    return p


EXPORT_FORMATS = tuple(FORMATS)
EXPORT_QUANTIZATIONS = ("int8",)


# `export`'s flags that not every format takes: (its destination, its default, why a format refuses it).
_EXPORT_FLAGS = (
    ("quantize", None, "applies to --format onnx, not {format}"),
    ("index", None, "the searcher is a SavedModel; --format {format} exports the encoder"),
    ("version", None, "TF Serving's version directories are SavedModels'; --format {format} writes OUT itself"),
    ("precision", "float32", "--format {format} exports float32 (for ONNX Runtime's int8: --quantize int8)"),
    ("allow_large_float32", False, "the searcher is a SavedModel; --format {format} exports the encoder"),
)


# `export`'s flags of GTR's exports that a reranker's refuses: (flag, destination, default).
_RERANKER_EXPORT_FLAGS = (
    ("--quantize", "quantize", None),
    ("--index", "index", None),
    ("--searcher", "searcher", "scann"),
    ("-k", "k", 10),
    ("--search-param", "search_param", None),
    ("--precision", "precision", "float32"),
    ("--query-length", "query_length", None),
    ("--document-length", "document_length", None),
    ("--version", "version", None),
    ("--allow-large-float32", "allow_large_float32", False),
    ("--dimensions", "dimensions", None),
)


def check(args, parser):
    """`export --format NAME` takes the flags of its format (`exports.export_formats.FORMATS`), whose
    packages must be installed (the one-line hint of the Python API too); `--search-param` sets a ScaNN
    searcher's."""
    if bool(args.model) == bool(args.reranker):
        parser.error("one of the arguments --model or --reranker is required, not both")
    export_format = FORMATS[args.format]
    if args.reranker:
        if not export_format.exports_rerankers():
            exported = [name for name, entry in FORMATS.items() if entry.exports_rerankers()]
            parser.error(
                f"argument --reranker: --format {args.format} exports GTR encoders; a reranker exports as "
                f"{' or '.join(exported)}"
            )
        given = [
            flag
            for flag, dest, default in _RERANKER_EXPORT_FLAGS
            if getattr(args, dest) != default and not (dest == "version" and args.format == "savedmodel")
        ]
        if given:
            parser.error(f"argument {given[0]}: does not apply to a reranker's export")
    if args.search_param and (not args.index or not args.searcher.startswith("scann")):
        parser.error("argument --search-param: sets the ScaNN searcher of --index (--searcher scann|scann-int8)")
    if args.searcher == "scann-int8" and any(name == "rescore_factor" for name, _ in args.search_param or []):
        parser.error(
            "argument --search-param: rescore_factor rescores with float32 vectors, which --searcher scann-int8 "
            "leaves out (--searcher scann keeps them)"
        )
    if args.allow_large_float32 and (not args.index or args.searcher != "scann"):
        parser.error("argument --allow-large-float32: goes with --index and --searcher scann (its float32 vectors)")
    for dest, default, reason in _EXPORT_FLAGS:
        if dest not in export_format.flags and getattr(args, dest) != default:
            parser.error(f"argument --{dest}: {reason.format(format=args.format)}")
    hint = missing_package_hint(export_format, "write", reranker=bool(args.reranker))
    if hint:
        parser.error(f"argument --format: {hint}")


@locks_output("args.out")  # before the model loads
def run(args):
    from gtr_keras.exports.export_formats import EXPORT_CONFIG_FILE, FORMATS
    from gtr_keras.exports.exporter import export as export_model

    if args.reranker:
        reranker = handler_inputs.reranker_source(
            argparse.Namespace(rerank=args.reranker)
        )  # one line for a model of no reranker
        written = export_model(reranker, args.out, args.format, version=args.version)
    else:
        searcher = {"searcher": args.searcher, "k": args.k} if "k" in FORMATS[args.format].options else {}
        written = export_model(
            lambda: handler_inputs.encoder(args),
            args.out,
            args.format,
            index=args.index or None,
            version=args.version,
            search_params=dict(args.search_param or []),
            quantize=args.quantize,
            allow_large_float32=args.allow_large_float32,
            dimensions=args.dimensions,
            **searcher,
        )
    for path in written:
        print(f"wrote {path}")
    if EXPORT_CONFIG_FILE in FORMATS[args.format].marks and not args.reranker:
        quantized = f", {args.quantize}" if args.quantize else ""
        spiece = os.path.join(args.out, "spiece.model")
        print(f"({args.format}{quantized}; token ids and mask in) with {spiece} and {EXPORT_CONFIG_FILE}")
