"""The checks of parsed `gtr-keras` arguments that look at several arguments, or at remote paths.

An output may not be, contain or lie inside an input or another output;
`index` takes a corpus or embeddings; paths with a scheme (`gs://...`) are
checked through `tf.io.gfile` like local ones. Each problem ends the command
like a bad flag: one line naming the flag, exit status 2.
"""

import fnmatch
import importlib.util
import ipaddress
import os
import socket
import urllib.parse

from gtr_keras.cli.arguments import GLOB_CHARACTERS, PROG, is_npy, is_remote
from gtr_keras.exports.export_formats import FORMATS, missing_package_hint

# Arguments without a path type that name a model: a model directory may be remote (`gs://...`), but
# `hf://ORG/NAME` (and keras-hub's other download ids, `model_source.DOWNLOAD_PREFIXES`) are read by the loader.
_MODEL_DESTS = ("model", "source", "init", "teacher", "reranker", "rerank")


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
            if not isinstance(path, str) or (model and not (is_remote(path) or os.path.exists(path))):
                continue
            found.append((name, path))
    if role == "output" and args.command == "encode":
        found.append(("--output", f"{os.path.splitext(args.output)[0]}.ids.txt"))
        found.append(("--output", f"{os.path.splitext(args.output)[0]}.json"))
    return found


def _config_settings(args):
    """`{dotted key: value}` of a `train`/`distill` `--config` file (`{}` without one, or for one the library
    will refuse with its file and line), so that its paths are checked like the flags'."""
    if not getattr(args, "config", None) or is_remote(args.config):
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
    flat.update(
        {
            f"{key}.{inner}": value
            for key, value in config.items()
            if isinstance(value, dict)
            for inner, value in value.items()
        }
    )
    return flat


def check_index_sources(args, parser):
    """`index` takes `--corpus` (with `--model`) or `--embeddings` (with `--bm25-corpus` if any), not both;
    `index --update`, the alias of `update`, takes `update`'s flags (`check_update_sources`) and none of a
    build's; `--rescore` goes with `--vectors int8|binary`."""
    if args.rescore is not None and args.vectors == "float32":
        parser.error("argument --rescore: rescores the candidates of --vectors int8|binary")
    if args.update:
        if args.runner:
            parser.error("argument --runner: not with --update (encode the new documents with --model and --corpus)")
        if not args.bm25:
            parser.error(
                "argument --no-bm25: not with --update (an update keeps the index's BM25 side in step, from --corpus)"
            )
        if args.exact:
            parser.error("argument --exact: not with --update (an update keeps the index's kind)")
        if args.vectors != "float32":
            parser.error("argument --vectors: not with --update (an update keeps the index's vectors)")
        check_update_sources(args, parser, "argument --update: ")
        return
    for flag in ("delete", "missing_ok", "compact"):
        if getattr(args, flag):
            parser.error(f"argument --{flag.replace('_', '-')}: updates an index: needs --update")
    _check_one_source(args, parser)
    if args.embeddings is not None and args.runner:
        parser.error("argument --runner: encodes a corpus; --embeddings are encoded already")
    if args.bm25_corpus is not None and args.embeddings is None:
        parser.error("argument --bm25-corpus: only with --embeddings (--corpus is indexed with BM25 itself)")


def check_update_sources(args, parser, prefix=""):
    """`update` takes `--corpus` (with `--model`) or `--embeddings`, or neither with `--delete` or
    `--compact`; `--missing-ok` goes with `--delete`."""
    if args.missing_ok and not args.delete:
        parser.error("argument --missing-ok: goes with --delete")
    if args.bm25_corpus is not None and args.embeddings is None:
        parser.error("argument --metadata-corpus: only with --embeddings (--corpus brings its own documents)")
    if args.corpus is None and args.embeddings is None:
        if not (args.delete or args.compact):
            parser.error(f"{prefix}needs --embeddings, --corpus (with --model), --delete or --compact")
        return
    _check_one_source(args, parser)


def _check_one_source(args, parser):
    if (args.corpus is None) == (args.embeddings is None):
        parser.error("one of the arguments --corpus (with --model) or --embeddings is required, not both")
    if args.corpus is not None and not args.model:
        parser.error("argument --model: required with --corpus")


def check_tune_queries(args, parser):
    """`tune --model` encodes a `--queries` file of text, which needs it; `.npy` vectors are encoded already."""
    text = args.queries is not None and not is_npy(args.queries)
    if text and not args.model:
        parser.error("argument --model: required with a --queries file of text (or give encoded .npy vectors)")
    if args.model and not text:
        parser.error("argument --model: encodes a --queries file of text; .npy vectors and --sample need none")


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
)


def check_export_format(args, parser):
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
    hint = missing_package_hint(export_format, "write")
    if hint:
        parser.error(f"argument --format: {hint}")


def loopback(host):
    """True when every address `host` names is a loopback one (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0].split("%")[0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False  # listening there says what is wrong
    return bool(addresses) and all(ipaddress.ip_address(address).is_loopback for address in addresses)


def check_serve(args, parser):
    """`--max-queue` holds a request of `--max-inputs` or `--max-queries` and a batch of `--batch-size` (a
    request it cannot hold would be told to retry forever; the flags of seconds are bounded by their type,
    `arguments.seconds`); a `--host` other than loopback needs a key or `--allow-unauthenticated`; keys are
    printable ASCII; the OTLP endpoint is an HTTP URL; a token budget holds a text of `--document-length`; the
    reranker's name (its directory's) is not one the model is served under."""
    for flag, value in (("--max-inputs", args.max_inputs), ("--max-queries", args.max_queries)):
        if value > args.max_queue:
            parser.error(f"argument {flag}: {value} is more than --max-queue holds")
    if args.batch_size > args.max_queue:
        parser.error(f"argument --batch-size: {args.batch_size} is more than --max-queue holds (a batch never fills)")
    model = args.served_model_name or os.path.basename(str(args.model).rstrip("/"))
    if args.reranker and os.path.basename(args.reranker.rstrip("/")) in (model, f"{model}-query", f"{model}-document"):
        parser.error(
            f"argument --reranker: its name is one the model is served under ({model}); give the model another "
            "with --served-model-name"
        )
    if any(not key or not all("!" <= character <= "~" for character in key) for key in args.api_keys or ()):
        parser.error("argument --api-key: a key must be printable ASCII without spaces (the key is not shown)")
    keyed = bool(args.api_keys or args.api_keys_file)
    if not keyed and not args.allow_unauthenticated and not loopback(args.host):
        parser.error(
            f"argument --host: {args.host} is not a loopback address: give --api-key or --api-keys-file, or "
            "--allow-unauthenticated to serve anyone who reaches it"
        )
    if args.metrics_port and args.metrics_port == args.port:
        parser.error(f"argument --metrics-port: {args.metrics_port} is --port; give another (or none)")
    if args.otlp_endpoint is not None:
        parts = urllib.parse.urlsplit(args.otlp_endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            parser.error(f"argument --otlp-endpoint: {args.otlp_endpoint!r} is not an http:// or https:// URL")
    length = args.document_length
    if args.max_batch_tokens is not None and length is not None and args.max_batch_tokens < length:
        parser.error(
            f"argument --max-batch-tokens: {args.max_batch_tokens} is less than --document-length {length}: "
            "a text of the document budget would fit no batch"
        )


# Flags that need an optional dependency: (flag's dest, what it needs, its module, the extra that installs it).
_EXTRAS = (
    ("runner", "Apache Beam", "apache_beam", "beam"),
    ("otlp_endpoint", "OpenTelemetry's SDK and OTLP exporter", "opentelemetry.exporter.otlp.proto.http", "otel"),
)
# Commands that need one: (command, what it needs, its modules, the extra that installs them).
_COMMAND_EXTRAS = (
    ("serve", "uvicorn and Starlette", ("uvicorn", "starlette"), "serve"),
    ("serve", "prometheus-client (/metrics)", ("prometheus_client",), "serve"),
    ("tune", "matplotlib (the recall-QPS plot)", ("matplotlib",), "plots"),
)


def check_extras(args, parser):
    """Refuses a flag whose optional dependency is not installed, naming the extra that installs it.

    Example:
    >>> check_extras(parser.parse_args(["index", "--runner", "DirectRunner", ...]), parser)  # doctest: +SKIP
    gtr-keras index: error: argument --runner: needs Apache Beam: pip install 'gtr-keras[beam]' ...
    """
    for dest, name, module, extra in _EXTRAS:
        if getattr(args, dest, None) and not _installed(module):
            parser.error(f"argument --{dest.replace('_', '-')}: needs {name}: pip install 'gtr-keras[{extra}]'")
    for command, name, modules, extra in _COMMAND_EXTRAS:
        if args.command == command and not all(_installed(module) for module in modules):
            parser.error(f"needs {name}: pip install 'gtr-keras[{extra}]'")


def _installed(module):
    """True when `module` can be imported (a dotted name whose package is missing too: False)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _comparable(path):
    """`(path, separator)` for comparing paths: local ones absolute with links resolved."""
    if is_remote(path) and not path.startswith("file://"):
        return path.rstrip("/"), "/"
    return os.path.realpath(path.removeprefix("file://")), os.sep


def _overlap(output, pattern):
    """True when `output` is, contains or lies inside `pattern` (a path, or a glob of corpus files)."""
    (out, sep), (given, _) = _comparable(output), _comparable(pattern)
    if any(c in pattern for c in GLOB_CHARACTERS) and not os.path.exists(pattern):
        folder = given[: min(given.index(c) for c in GLOB_CHARACTERS if c in given)].rpartition(sep)[0]
        return fnmatch.fnmatch(out, given) or out == folder or folder.startswith(out + sep)
    return out == given or out.startswith(given + sep) or given.startswith(out + sep)


def check_outputs(args, parser, standalone):
    """Refuses (exit status 2, before any work) an output that is, contains or lies inside one of the
    command's inputs or another of its outputs, and, when the command is the process (`standalone`), an
    output on `ram://`, which lives only as long as the process that writes it."""
    outputs = _path_arguments(args, parser, "output")
    inputs = _path_arguments(args, parser, "input")
    for number, (flag, path) in enumerate(outputs):
        if standalone and path.startswith("ram://"):
            parser.error(
                f"argument {flag}: {path}: ram:// lives inside one process only: the output would vanish "
                f"when {PROG} exits"
            )
        others = [(f"input {name}", given) for name, given in inputs] + [
            (f"output {name}", given) for name, given in outputs[number + 1 :]
        ]
        for other, given in others:
            if _overlap(path, given):
                parser.error(
                    f"argument {flag}: {path} overlaps {other} {given} (an output may not be, contain or "
                    "lie inside an input or another output)"
                )


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
        if kind == "index":
            from gtr_keras.index.layout import RETRIEVER_JSON, not_an_index

            if not files.exists(f"{path.rstrip('/')}/{RETRIEVER_JSON}"):
                return not_an_index(path)
    elif role == "model" and not exists:
        return f"{path}: no such model directory"
    elif role == "output" and exists:
        if kind == "file" and files.isdir(path):
            return f"{path}: is a directory, expected a file name"
        if kind == "directory" and not files.isdir(path):
            return f"{path}: exists and is not a directory"
    return None


def check_remote_paths(args, parser):
    """Checks the path arguments with a scheme (`gs://...`) the argparse types let through, as they check
    local ones, before the handler does any work; a problem ends the command like a bad flag (exit status 2).

    Needs TensorFlow (`tf.io.gfile`): call it once the handler's module is imported.
    """
    for action in parser._actions:
        given = getattr(args, action.dest, None)
        for value in given if isinstance(given, list) else [given]:  # a repeated flag (`search --index`) too
            if isinstance(value, str) and is_remote(value):
                _check_remote_path(parser, action, value)


def _check_remote_path(parser, action, value):
    from gtr_keras.errors import DataError

    check = getattr(action.type, "path_check", None)
    if getattr(action.type, "allows_glob", False) and any(c in value for c in GLOB_CHARACTERS):
        return
    if check is None and action.dest in _MODEL_DESTS:
        from gtr_keras.models.model_files.model_source import DOWNLOAD_PREFIXES  # Keras: only for a remote model

        if not value.startswith(DOWNLOAD_PREFIXES):
            check = ("model", "directory")
    if check is None:
        return
    try:
        problem = _remote_path_problem(value, check)
    except DataError as error:
        problem = str(error)
    if problem:
        name = "/".join(action.option_strings) or action.dest
        parser.error(f"argument {name}: {problem}")
