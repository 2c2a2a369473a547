"""The argument types of the `gtr-keras` command line: bounded numbers and paths checked as they are parsed.

Each type raises `argparse.ArgumentTypeError`, which the parser (`Parser`)
reports as one line naming the flag, with exit status 2. Local paths are
checked here; paths with a scheme (`gs://...`) carry a `path_check` attribute
and are checked by `gtr_keras.cli.helpers.flag_checks.check_remote_paths` once TensorFlow is
loaded. The module imports neither TensorFlow nor the rest of the package.

Example:
>>> input_file("README.md")
'README.md'
>>> at_least_one("0")
Traceback (most recent call last):
argparse.ArgumentTypeError: must be at least 1, got 0
"""

import argparse
import os

PROG = "gtr-keras"


class _HelpFormatter(argparse.HelpFormatter):
    """Appends `(default: X)` to a flag's help unless the help already says its default."""

    def _get_help_string(self, action):
        text = action.help or ""
        unstated = action.default is None or action.default is False or action.default is argparse.SUPPRESS
        if "default" in text or not action.option_strings or unstated:
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` that reports a bad argument in one line (exit status 2)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def int_at_least(minimum, why=""):
    """An argparse type: an integer of at least `minimum` (`why` says what the bound is for)."""

    def parse(text):
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}{why}, got {value}")
        return value

    parse.__name__ = "int"  # argparse names the type in "invalid int value: ..."
    return parse


def dimensions(text):
    """An argparse type: N of `--dimensions`, an integer of at least 1 (`utils.dimensions`' rule; at most D,
    the model's, once it loads).

    Example:
    >>> dimensions("1.5")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be an integer of at least 1, got '1.5'
    """
    from gtr_keras.utils.dimensions import dimensions_rule

    value = int(text) if text.strip().lstrip("+-").isdigit() else text
    reason = dimensions_rule(value)
    if reason:
        raise argparse.ArgumentTypeError(reason)
    return value


def passages(text):
    """An argparse type: `--passages TOKENS[:STRIDE]` as a `(tokens, stride)` pair (the rule of
    `models.token_windows.parse_passages`; TOKENS at most the model's document budget, once it loads).

    Example:
    >>> passages("64:32")
    (64, 32)
    """
    from gtr_keras.errors import UserError
    from gtr_keras.models.token_windows import parse_passages

    try:
        return parse_passages(text)
    except UserError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("passages: ")) from None


def dimension_list(text):
    """An argparse type: comma-separated `dimensions` (`--matryoshka-dims 64,128,256`), a list of integers.

    Example:
    >>> dimension_list("128,64")
    [128, 64]
    """
    return [dimensions(part) for part in text.split(",")]


dimension_list.__name__ = "dimensions"


def positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


positive_float.__name__ = "float"


def at_least_zero_float(text):
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value


at_least_zero_float.__name__ = "float"


# The longest wait a flag may set (seconds: a day): `server.deadlines.LONGEST_WAIT`, which a thread's wait stays
# far within (`threading.TIMEOUT_MAX`; a wait of more overflows).
LONGEST_WAIT = 86_400.0


def seconds(zero=False, per_second=1, unit="seconds"):
    """An argparse type: a wait, in `unit`s (`per_second` of them a second): positive (at least 0 with `zero`),
    finite and at most a day (`LONGEST_WAIT`).

    Example:
    >>> seconds()("1e300")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be at most 86400 seconds (a day), got 1e300
    """

    def parse(text):
        value = float(text)
        if not (value >= 0 if zero else value > 0):
            raise argparse.ArgumentTypeError(f"must be {'at least 0' if zero else 'positive'}, got {text}")
        if value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a finite number of {unit}")
        most = LONGEST_WAIT * per_second
        if value > most:
            raise argparse.ArgumentTypeError(f"must be at most {most:g} {unit} (a day), got {text}")
        return value

    parse.__name__ = "float"
    return parse


def fraction(text):
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


fraction.__name__ = "float"


def fraction_or_zero(text):
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


fraction_or_zero.__name__ = "float"


def port_number(text):
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 (a free port) to 65535, got {value}")
    return value


port_number.__name__ = "int"


def search_param(text):
    """`NAME=VALUE`, a search setting and its int value (`layout.check_search_value`'s rule), as `(name, value)`."""
    from gtr_keras.errors import UserError
    from gtr_keras.storage.layout import check_search_value

    name, equals, value = text.partition("=")
    if not equals or not name or not value.isdigit():
        raise argparse.ArgumentTypeError(f"must be NAME=VALUE with an int VALUE, got {text!r}")
    try:
        return name, check_search_value(name, int(value))
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


search_param.__name__ = "NAME=VALUE"

at_least_one = int_at_least(1)
at_least_zero = int_at_least(0)
token_budget = int_at_least(2, " (one token and EOS)")


def text(value):
    r"""A text argument as valid Unicode: bytes that are not UTF-8 (which Python keeps as surrogate escapes)
    replaced by U+FFFD, as the tokenizer and BM25 replace them in files.

    Example:
    >>> text("wing \udcff lift")
    'wing � lift'
    """
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def is_remote(path):
    return "://" in path


def is_npy(path):
    """Whether `path` names a `.npy` file of vectors, in any case (`Q.NPY` too).

    Example:
    >>> is_npy("queries.NPY"), is_npy("queries.jsonl")
    (True, False)
    """
    return os.fspath(path).lower().endswith(".npy")


def input_path(kind):
    """An argparse type for an input that must exist: `"file"`, `"directory"` or `"path"` (either).

    Paths with a scheme (`gs://...`) are checked by `check_remote_paths` once TensorFlow is loaded.
    """

    def parse(path):
        if is_remote(path):
            return path
        if not os.path.exists(path):
            raise argparse.ArgumentTypeError(f"{path}: no such {'file or directory' if kind == 'path' else kind}")
        if kind == "file" and os.path.isdir(path):
            raise argparse.ArgumentTypeError(f"{path}: is a directory, expected a file")
        if kind == "directory" and not os.path.isdir(path):
            raise argparse.ArgumentTypeError(f"{path}: is a file, expected a directory")
        if not os.access(path, os.R_OK):
            raise argparse.ArgumentTypeError(f"{path}: not readable (permission denied)")
        return path

    parse.__name__ = kind
    parse.path_check = ("input", kind)
    return parse


def output_path(kind, suffix=None):
    """An argparse type for an output `"file"` or `"directory"`, written (or replaced) at the end.

    The path must not be of the other kind, and its nearest existing parent
    must be a writable directory (missing parents are created on writing).
    Paths with a scheme (`gs://...`) are checked by `check_remote_paths`.
    """

    def parse(path):
        if suffix and not path.endswith(suffix):
            raise argparse.ArgumentTypeError(f"{path}: must end with {suffix}")
        if is_remote(path):
            return path
        if kind == "file" and os.path.isdir(path):
            raise argparse.ArgumentTypeError(f"{path}: is a directory, expected a file name")
        if kind == "directory" and os.path.exists(path) and not os.path.isdir(path):
            raise argparse.ArgumentTypeError(f"{path}: exists and is not a directory")
        parent = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise argparse.ArgumentTypeError(f"{path}: cannot be created, {parent} is a file")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(f"{path}: cannot be written, {parent} is not writable")
        return path

    parse.__name__ = f"output {kind}"
    parse.path_check = ("output", kind)
    return parse


def index_directory(path):
    from gtr_keras.storage.layout import RETRIEVER_JSON, not_an_index

    path = input_path("directory")(path)
    if not is_remote(path) and not os.path.isfile(os.path.join(path, RETRIEVER_JSON)):
        raise argparse.ArgumentTypeError(not_an_index(path))
    return path


index_directory.__name__ = "index directory"
index_directory.path_check = ("input", "index")


def engine_target(text):
    """A search engine's target (`qdrant:PATH`, `milvus+http://HOST:PORT`, ...: `engines.targets.parse_target`)."""
    from gtr_keras.engines.targets import parse_target
    from gtr_keras.errors import UserError

    try:
        parse_target(text)
    except UserError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


engine_target.__name__ = "target"


def index_or_target(text):
    """An index directory (`index_directory`), or a search engine's target (`engine_target`) searched through
    its collection."""
    from gtr_keras.engines.targets import names_engine

    return engine_target(text) if names_engine(text) else index_directory(text)


index_or_target.__name__ = "index directory or target"
index_or_target.path_check = index_directory.path_check

input_file = input_path("file")
input_dir = input_path("directory")
input_any = input_path("path")
GLOB_CHARACTERS = "*?["


def corpus_source(path):
    """A BEIR directory or corpus file that must exist, or a glob of corpus files (checked by `index`)."""
    if any(c in path for c in GLOB_CHARACTERS) and not (not is_remote(path) and os.path.exists(path)):
        return path
    return input_any(path)


corpus_source.__name__ = "corpus"
corpus_source.path_check = input_any.path_check
corpus_source.allows_glob = True


def embedding_source(path):
    """An embedding file, or a glob of them (matched by `index`)."""
    return corpus_source(path)


embedding_source.__name__ = "embeddings"
embedding_source.path_check = input_any.path_check
embedding_source.allows_glob = True
output_file = output_path("file")
output_dir = output_path("directory")
MODEL_HELP = (
    "model directory, sentence-transformers checkpoint, hf://ORG/NAME, a bundled model (gtr_small_distilled_en) "
    "or a published one by name (gtr_t5_base_en ... gtr_t5_xxl_en)"
)
