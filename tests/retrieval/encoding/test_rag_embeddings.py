import numpy as np
import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("qdrant_client")
pytest.importorskip("pymilvus")

import apache_beam as beam  # noqa: E402
from apache_beam.ml.inference.base import RunInference  # noqa: E402
from apache_beam.ml.rag.ingestion.milvus_search import MilvusVectorWriterConfig, MilvusWriteConfig  # noqa: E402
from apache_beam.ml.rag.ingestion.qdrant import QdrantConnectionParameters, QdrantWriteConfig  # noqa: E402
from apache_beam.ml.rag.types import Chunk, Content  # noqa: E402
from apache_beam.ml.rag.utils import MilvusConnectionParameters  # noqa: E402
from apache_beam.ml.transforms.base import MLTransform  # noqa: E402

from gtr_keras.beir.readers import Corpus  # noqa: E402
from gtr_keras.engines.engine import CollectionInfo  # noqa: E402
from gtr_keras.engines.targets import parse_target  # noqa: E402
from gtr_keras.retrieval.encoding.engine_pipeline import MILVUS_COLUMNS, create_collection  # noqa: E402
from gtr_keras.retrieval.encoding.rag_embeddings import GTRTextEmbeddings, document_texts  # noqa: E402

TITLES = ["Wings", "", "Drag", ""]
TEXTS = ["Lift on a wing.", "A body moving through air.", "", "Pressure and lift at high speed over a long wing."]


def chunks():
    return [
        Chunk(content=Content(text=text), id=str(number), metadata={"title": title, "source": "test"})
        for number, (title, text) in enumerate(zip(TITLES, TEXTS))
    ]


def expected_vectors(encoder, dimensions=None):
    return encoder.encode_documents(Corpus(["0", "1", "2", "3"], TITLES, TEXTS).joined(), dimensions=dimensions)


def test_document_texts_put_the_title_before_the_text_as_a_corpus_document_is_embedded():
    assert document_texts(chunks()) == ["Wings Lift on a wing.", "A body moving through air.", "Drag", TEXTS[3]]
    assert document_texts(chunks(), title_key=None)[:3] == TEXTS[:3]
    with pytest.raises(ValueError, match="^Expected text content in EmbeddableItem 9, got None$"):
        document_texts([Chunk(content=Content(), id="9")])


def test_the_manager_hands_mltransform_a_model_handler_of_its_settings(tiny_model_dir):
    manager = GTRTextEmbeddings(tiny_model_dir, dimensions=16, batch_size=4, max_batch_size=8, large_model=True)
    handler = manager.get_model_handler()
    assert (handler.model_dir, handler.dimensions, handler.batch_size) == (tiny_model_dir, 16, 4)
    assert handler.batch_elements_kwargs() == {"min_batch_size": 8, "max_batch_size": 8}
    assert handler.share_model_across_processes()
    assert isinstance(manager.get_ptransform_for_processing(), RunInference)


@pytest.mark.filterwarnings("ignore:dimensions=16")
def test_a_users_pipeline_embeds_chunks_and_beams_own_writers_store_them_in_qdrant_and_milvus(
    tmp_path, tiny_model_dir, tiny_encoder
):
    from pymilvus import MilvusClient
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(tmp_path / "qdrant"))
    client.create_collection("docs", vectors_config={"dense": models.VectorParams(size=16, distance="Dot")})
    client.close()
    target = parse_target(f"milvus:{tmp_path / 'milvus.db'}")
    create_collection(target, "docs", CollectionInfo(tiny_encoder.embedding_dim, "m", {}))
    qdrant = QdrantWriteConfig(
        connection_params=QdrantConnectionParameters.local(str(tmp_path / "qdrant")), collection_name="docs"
    )
    milvus = MilvusVectorWriterConfig(
        connection_params=MilvusConnectionParameters(uri=target.location),
        write_config=MilvusWriteConfig(collection_name="docs"),
        column_specs=MILVUS_COLUMNS,
    )
    numbered = [Chunk(content=c.content, id=c.id, metadata=c.metadata) for c in chunks()]

    with beam.Pipeline() as pipeline:
        embedded = pipeline | "Chunks" >> beam.Create(chunks())
        _ = (
            embedded
            | "Truncated"
            >> MLTransform(write_artifact_location=str(tmp_path / "a1")).with_transform(
                GTRTextEmbeddings(tiny_model_dir, dimensions=16, batch_size=2)
            )
            | "Qdrant" >> qdrant.create_write_transform()
        )
        _ = (
            pipeline
            | "More" >> beam.Create(numbered)
            | "Full"
            >> MLTransform(write_artifact_location=str(tmp_path / "a2")).with_transform(
                GTRTextEmbeddings(tiny_model_dir)
            )
            | "Milvus" >> milvus.create_write_transform()
        )

    client = QdrantClient(path=str(tmp_path / "qdrant"))
    points = sorted(client.scroll("docs", with_vectors=True, limit=10)[0], key=lambda p: p.id)
    client.close()
    assert [p.id for p in points] == [0, 1, 2, 3] and points[0].payload == {"title": "Wings", "source": "test"}
    np.testing.assert_allclose(
        [p.vector["dense"] for p in points], expected_vectors(tiny_encoder, 16), atol=1e-5, rtol=0
    )
    client = MilvusClient(target.location)
    rows = sorted(client.query("docs", filter="", output_fields=["*"], limit=10), key=lambda r: r["id"])
    client.close()
    assert [(r["id"], r["title"], r["text"], r["metadata"]) for r in rows] == [
        (str(n), title, text, {}) for n, (title, text) in enumerate(zip(TITLES, TEXTS))
    ]
    np.testing.assert_allclose([r["embedding"] for r in rows], expected_vectors(tiny_encoder), atol=1e-5, rtol=0)
