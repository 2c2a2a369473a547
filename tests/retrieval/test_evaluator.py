"""`gtr_keras.evaluate`: a model's metrics are those of `gtr-keras evaluate`, an `Index` of the collection's
corpus gives the same ones by exact search, and BM25 needs no model."""

import json

import pytest
from beir_files import write_beir

import gtr_keras
from gtr_keras.beir.readers import Corpus
from gtr_keras.cli.main import main
from gtr_keras.errors import UserError

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    texts = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + i % 5)) for i in range(30)]
    corpus = Corpus([f"d{i}" for i in range(30)], [f"title {i}" for i in range(30)], texts)
    queries = {"q1": "boundary layer heat", "q2": "wing flutter", "q3": "nozzle jet"}
    qrels = [("q1", "d3", 1), ("q1", "d8", 2), ("q2", "d5", 1), ("q3", "d11", 1), ("q3", "d20", 1)]
    return write_beir(tmp_path_factory.mktemp("beir") / "ds", corpus, queries, qrels)


@pytest.mark.parametrize("retriever", ["gtr", "bm25", "hybrid"])
def test_a_model_scores_as_the_command_line(dataset, tiny_model_dir, tmp_path, retriever):
    model = [] if retriever == "bm25" else ["--model", tiny_model_dir]
    out = tmp_path / "metrics.json"
    argv = ["evaluate", "--dataset", str(dataset), "--retriever", retriever, *model, "--output-json", str(out)]
    assert main(argv) == 0
    expected = json.loads(out.read_text())["metrics"]
    assert gtr_keras.evaluate(tiny_model_dir if model else None, dataset, retriever=retriever) == expected


def test_an_index_of_the_collection_scores_as_the_model(dataset, tiny_model_dir, tiny_encoder, tmp_path):
    index = gtr_keras.Index.build(tmp_path / "idx", dataset, tiny_model_dir)
    for retriever in ("gtr", "hybrid"):
        expected = gtr_keras.evaluate(tiny_encoder, dataset, retriever=retriever, fusion=index.fusion)
        found = gtr_keras.evaluate(index, dataset, retriever=retriever)
        assert found.keys() == expected.keys()
        for metric, value in expected.items():
            assert found[metric] == pytest.approx(value, abs=1e-6), metric
    with pytest.raises(UserError, match="retriever must be one of"):
        gtr_keras.evaluate(tiny_encoder, dataset, retriever="splade")
