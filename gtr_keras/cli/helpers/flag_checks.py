"""The checks of parsed `gtr-keras` arguments that several commands share, or that look at remote paths (a
command's own are its module's `check`, in `gtr_keras.cli.commands`).

An output may not be, contain or lie inside an input or another output;
`index` and `update` take a corpus or embeddings; `search` and `evaluate` the
retriever's flags; paths with a scheme (`gs://...`) are checked through
`tf.io.gfile` like local ones. Each problem ends the command
like a bad flag: one line naming the flag, exit status 2.
"""

import fnmatch
import importlib.util
import os

from gtr_keras.cli.helpers.flag_types import GLOB_CHARACTERS, PROG, is_remote
from gtr_keras.engines.targets import names_engine

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
    if role == "output" and args.command == "encode" and args.output:
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


def check_update_sources(args, parser):
    """`update` takes `--corpus` (with `--model`) or `--embeddings`, or neither with `--delete` or
    `--compact`; `--missing-ok` goes with `--delete`."""
    if args.missing_ok and not args.delete:
        parser.error("argument --missing-ok: goes with --delete")
    if args.bm25_corpus is not None and args.embeddings is None:
        parser.error("argument --metadata-corpus: only with --embeddings (--corpus brings its own documents)")
    if args.corpus is None and args.embeddings is None:
        if not (args.delete or args.compact):
            parser.error("needs --embeddings, --corpus (with --model), --delete or --compact")
        return
    check_one_source(args, parser)


def check_one_source(args, parser):
    if (args.corpus is None) == (args.embeddings is None):
        parser.error("one of the arguments --corpus (with --model) or --embeddings is required, not both")
    if args.corpus is not None and not args.model:
        parser.error("argument --model: required with --corpus")


def check_retriever_flags(args, parser):
    """`search` and `evaluate`: `--model` unless `--retriever bm25`; `--fusion` and `--gtr-weight` fuse
    `--retriever hybrid`."""
    if args.retriever != "bm25" and not args.model:
        parser.error(f"argument --model: required with --retriever {args.retriever}")
    if args.retriever != "hybrid":
        for flag, value in (("--fusion", args.fusion), ("--gtr-weight", args.gtr_weight)):
            if value is not None:
                parser.error(f"argument {flag}: fuses --retriever hybrid, not {args.retriever}")


def check_rerank_flags(args, parser):
    """`search` and `evaluate`: `--rerank-depth` goes with `--rerank`, and is at least `search`'s `-k`."""
    if args.rerank_depth is not None and not args.rerank:
        parser.error("argument --rerank-depth: goes with --rerank")
    k = getattr(args, "k", None)
    if args.rerank_depth is not None and k is not None and args.rerank_depth < k:
        parser.error(
            f"argument --rerank-depth: {args.rerank_depth} is below -k {k}: the best k of the reranked hits are shown"
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
            from gtr_keras.storage.layout import RETRIEVER_JSON, not_an_index

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
            if isinstance(value, str) and is_remote(value) and not names_engine(value):
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


def check_engine_index(args, parser):
    """An engine's target as `--index` (`qdrant:PATH`, ...) goes with `--collection`, alone, and `--collection`
    with one (`search`, `serve`)."""
    indexes = args.index if isinstance(args.index, list) else [args.index] if args.index else []
    targets = [index for index in indexes if names_engine(index)]
    if targets and not args.collection:
        parser.error(f"argument --collection: required with an engine's target as --index ({targets[0]})")
    if args.collection and not targets:
        parser.error("argument --collection: names a collection of an engine's target as --index (qdrant:PATH, ...)")
    if targets and len(indexes) > 1:
        parser.error("argument --index: an engine's target is searched alone (one --index)")
