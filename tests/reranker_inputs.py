"""The tiny cross-encoder checkpoints of the reranker tests (`reference_cross_encoders.py` made them), their
reference record, and fixtures of their converted model directories and scorers."""

import json
import os

import pytest

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
CHECKPOINTS = {
    "bert": os.path.join(FIXTURES, "tiny-bert-cross-encoder"),
    "xlmr": os.path.join(FIXTURES, "tiny-xlmr-cross-encoder"),
}
with open(os.path.join(FIXTURES, "tiny-cross-encoder-reference.json"), encoding="utf-8") as _f:
    REFERENCE = json.load(_f)
PAIRS = [tuple(pair) for pair in REFERENCE["pairs"]]


@pytest.fixture(scope="session")
def reranker_dirs(tmp_path_factory):
    """`{family: model directory}` of both checkpoints, converted with `gtr-keras convert`."""
    from gtr_keras.cli.main import main

    root = tmp_path_factory.mktemp("rerankers")
    converted = {}
    for family, checkpoint in CHECKPOINTS.items():
        converted[family] = str(root / family)
        assert main(["convert", checkpoint, converted[family]]) == 0
    return converted


@pytest.fixture(scope="session")
def bert_scorer(reranker_dirs):
    import gtr_keras

    return gtr_keras.load(reranker_dirs["bert"])
