import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
TINY_ST = os.path.join(FIXTURES, "tiny-gtr-st")


@pytest.fixture(scope="session")
def tiny_st_dir():
    """The committed tiny GTR checkpoint in sentence-transformers layout."""
    return TINY_ST


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The committed tiny checkpoint converted to a gtr-keras model directory."""
    from gtr_keras.cli import main

    out = str(tmp_path_factory.mktemp("models") / "tiny")
    assert main(["convert", TINY_ST, out]) == 0
    return out


@pytest.fixture(scope="session")
def tiny_encoder(tiny_model_dir):
    from gtr_keras.checkpoints import load

    return load(tiny_model_dir)
