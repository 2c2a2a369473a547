import gzip
import json
import os
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

# pymilvus' import reconfigures logging (`dictConfig`), closing every handler; absl's closes the stream it holds,
# which is pytest's capture of the test that first imports pymilvus unless it is imported here, before any capture.
try:
    import pymilvus  # noqa: E402, F401
except ImportError:
    pass
from reranker_inputs import bert_scorer, reranker_dirs  # noqa: E402, F401  (the rerankers' fixtures)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
TINY_ST = os.path.join(FIXTURES, "tiny-gtr-st")


def write_jsonl(path, records):
    """Writes `records` to `path` one a line (a dict as JSON, a str as it is), gzipped when named `*.gz`."""
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def shown_warnings():
    """Every warning shown in the test, whatever `PYTHONWARNINGS` or `-W` say: for the tests that assert on
    the command line's warning lines (the test sets the warning state it asserts on)."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        yield


@pytest.fixture(scope="session")
def tiny_st_dir():
    """The committed tiny GTR checkpoint in sentence-transformers layout."""
    return TINY_ST


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The committed tiny checkpoint converted to a gtr-keras model directory."""
    from gtr_keras.cli.main import main

    out = str(tmp_path_factory.mktemp("models") / "tiny")
    assert main(["convert", TINY_ST, out]) == 0
    return out


@pytest.fixture(scope="session")
def tiny_encoder(tiny_model_dir):
    from gtr_keras.saving import load_model

    return load_model(tiny_model_dir)


@pytest.fixture(scope="session")
def tiny_onnx_export(tmp_path_factory, tiny_encoder):
    """The tiny model's float32 ONNX export directory (`export_onnx`; needs tf2onnx and onnxruntime)."""
    from gtr_keras.exports.onnx_export import export_onnx

    return os.path.dirname(export_onnx(tiny_encoder, str(tmp_path_factory.mktemp("onnx") / "float32")))


def pytest_collection_modifyitems(items):
    """Runs the tests marked `slow` first, so that the parallel workers (pytest-xdist) end together on
    short tests instead of one of them waiting for the other's last long test."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
