import numpy as np
import pytest

from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import DataError, UserError
from gtr_keras.lexical.fusion import Fusion
from gtr_keras.retrieval.hybrid_retriever import HybridRetriever
from gtr_keras.retrieval.index_building import build_index
from gtr_keras.retrieval.retriever import Retriever

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()


def _corpus(n=40, seed=0):
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(3, 12))) for _ in range(n)]
    return Corpus([f"d{i}" for i in range(n)], [f"title {i}" for i in range(n)], texts)


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_encoder, tiny_model_dir):
    directory = tmp_path_factory.mktemp("hybrid") / "idx"
    build_index(tiny_encoder, _corpus(), directory, model_dir=tiny_model_dir)
    return directory


def test_each_retriever_answers_with_titles_and_texts(index_dir, tiny_encoder):
    hybrid = HybridRetriever.load(index_dir, tiny_encoder, Fusion("weighted", 0.5))
    query = ["shock boundary layer"]
    assert hybrid.search(query, 5, "gtr") == Retriever.load(index_dir, tiny_encoder).search(query, 5)
    bm25 = hybrid.search(query, 5, "bm25")[0]
    assert bm25 and all({"id", "score", "title", "text"} <= set(hit) for hit in bm25)
    fused = hybrid.search(query, 5)[0]
    assert len(fused) == 5 and fused[0]["title"].startswith("title ")
    assert [hit["score"] for hit in fused] == sorted((hit["score"] for hit in fused), reverse=True)


def test_hybrid_is_the_fusion_of_both_sides_at_depth_cut_at_k(index_dir, tiny_encoder):
    fusion = Fusion("weighted", 0.3)
    hybrid = HybridRetriever.load(index_dir, tiny_encoder, fusion, depth=20)
    query = ["flutter nozzle jet"]
    gtr = {hit["id"]: hit["score"] for hit in hybrid.search(query, 20, "gtr")[0]}
    bm25 = {hit["id"]: hit["score"] for hit in hybrid.search(query, 20, "bm25")[0]}
    expected = list(fusion.fuse(gtr, bm25).items())[:3]
    assert [(hit["id"], pytest.approx(hit["score"])) for hit in hybrid.search(query, 3)[0]] == expected


def test_k_beyond_both_sides_returns_every_document_either_retrieved(index_dir, tiny_encoder):
    hybrid = HybridRetriever.load(index_dir, tiny_encoder, Fusion("rrf"), depth=5)
    hits = hybrid.search(["wing"], 100)[0]
    assert len(hits) == 40 and len({hit["id"] for hit in hits}) == 40  # GTR retrieves k = 100 > 40 documents


def test_bm25_alone_needs_no_model_but_the_others_do(index_dir):
    hybrid = HybridRetriever.load(index_dir, None)
    assert hybrid.search(["mach cone"], 2, "bm25")[0]
    with pytest.raises(UserError, match="hybrid search needs the model"):
        hybrid.search(["mach cone"], 2)
    with pytest.raises(UserError, match="retriever must be one of"):
        hybrid.search(["mach cone"], 2, "splade")


def test_an_index_without_a_bm25_side_is_refused(tmp_path, tiny_encoder, tiny_model_dir):
    build_index(tiny_encoder, _corpus(8), tmp_path / "idx", model_dir=tiny_model_dir, bm25=False)
    with pytest.raises(DataError, match="no BM25 side"):
        HybridRetriever.load(tmp_path / "idx", tiny_encoder)
    assert Retriever.load(tmp_path / "idx", tiny_encoder).search(["wing"], 1)[0]


def test_config_says_the_fusion_and_depth(index_dir, tiny_encoder):
    config = HybridRetriever.load(index_dir, tiny_encoder, Fusion("rrf", 0.4), depth=50).get_config()
    assert config == {"fusion": {"method": "rrf", "gtr_weight": 0.4, "rrf_k": 60}, "depth": 50}
