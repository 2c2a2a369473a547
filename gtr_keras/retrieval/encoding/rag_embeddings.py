"""`GTRTextEmbeddings`: a gtr-keras model as an embeddings manager of Apache Beam's `apache_beam.ml.rag`, in the
shape of Beam's own `HuggingfaceTextEmbeddings`.

`MLTransform(write_artifact_location=...).with_transform(GTRTextEmbeddings(model))` embeds the `Chunk`s
(`EmbeddableItem`s) of a pipeline as gtr-keras' document encoder embeds documents (`"title text"`, the title
read from each chunk's `metadata["title"]`), one model loaded per worker process (per machine with
`large_model=True`); Beam's own writers (`QdrantWriteConfig`, `MilvusVectorWriterConfig`, ...) then store the
chunks with their `dense_embedding`. `engine_pipeline` runs this from a corpus file to a Qdrant or Milvus
collection (`gtr-keras encode --to`).

Example:
>>> import apache_beam as beam
>>> from apache_beam.ml.rag.ingestion.qdrant import QdrantConnectionParameters, QdrantWriteConfig
>>> from apache_beam.ml.rag.types import Chunk, Content
>>> from apache_beam.ml.transforms.base import MLTransform
>>> chunk = Chunk(content=Content(text="Lift on a wing."), id="1", metadata={"title": "Wings"})
>>> with beam.Pipeline() as pipeline:  # doctest: +SKIP
...     _ = (
...         pipeline
...         | beam.Create([chunk])
...         | MLTransform(write_artifact_location="/tmp/artifacts").with_transform(GTRTextEmbeddings("models/gtr-base"))
...         | QdrantWriteConfig(QdrantConnectionParameters.local("qdrant"), "docs").create_write_transform()
...     )
"""

import functools
import os

from apache_beam.ml.inference.base import RunInference
from apache_beam.ml.rag.types import EmbeddableItem, Embedding
from apache_beam.ml.transforms.base import EmbeddingsManager, EmbeddingTypeAdapter

from gtr_keras.beir.readers import Corpus
from gtr_keras.retrieval.encoding.model_handlers import GTRModelHandler


def document_texts(items, title_key="title"):
    """The strings gtr-keras embeds for `items` (`EmbeddableItem`s): `"title text"` as `Corpus.joined()` joins a
    document's, the title being `item.metadata[title_key]` (none: `""`; `title_key` None: no title).

    Raises:
        ValueError: an item without text (`content.text` None), naming its id, as Beam's text adapter does.

    Example:
    >>> from apache_beam.ml.rag.types import Chunk, Content
    >>> document_texts([Chunk(content=Content(text="Body."), id="d1", metadata={"title": "A title"})])
    ['A title Body.']
    """
    for item in items:
        if item.content.text is None:
            raise ValueError(f"Expected text content in {type(item).__name__} {item.id}, got None")
    titles = [str(item.metadata.get(title_key) or "") if title_key else "" for item in items]
    return Corpus([item.id for item in items], titles, [item.content.text for item in items]).joined()


def with_embeddings(items, embeddings):
    """`items` with `embedding` set to their row of `embeddings` (a dense `Embedding`, as Beam's adapters set it)."""
    for item, embedding in zip(items, embeddings):
        item.embedding = Embedding(dense_embedding=list(embedding))
    return list(items)


class GTREmbeddingHandler(GTRModelHandler):
    """A `RunInference` model handler over `EmbeddableItem`s: `GTRModelHandler`'s model (loaded once per worker
    process, checked against `model_sha256`) encoding the texts `type_adapter` takes from a batch of items, and
    the items back with their embeddings.

    Args:
        model_dir: as for `GTRModelHandler`.
        type_adapter: a Beam `EmbeddingTypeAdapter` (`input_fn`: items to texts; `output_fn`: items and
            embeddings to items).
        dimensions: N, to keep the first N coordinates of each embedding renormalised (`encode_documents`'
            `dimensions`); None: all D.
        **options: `GTRModelHandler`'s `batch_size`, `group_size`, `large_model`, `model_sha256`,
            `load_model_args`.
    """

    def __init__(self, model_dir, type_adapter, dimensions=None, **options):
        super().__init__(model_dir, **options)
        self.type_adapter = type_adapter
        self.dimensions = dimensions

    def run_inference(self, batch, model, inference_args=None):
        texts = self.type_adapter.input_fn(batch)
        embeddings = model.encode_documents(texts, self.batch_size, progress=False, dimensions=self.dimensions)
        return self.type_adapter.output_fn(batch, embeddings.tolist())

    def get_num_bytes(self, batch):
        return super().get_num_bytes(self.type_adapter.input_fn(batch))


class GTRTextEmbeddings(EmbeddingsManager):
    """GTR document embeddings for `apache_beam.ml.rag` pipelines: `MLTransform(...).with_transform(...)` over
    `Chunk`s sets each chunk's `dense_embedding` to what `encoder.encode_documents` gives its `"title text"`.

    Args:
        model: a gtr-keras model directory every worker reads (local, or on a Beam file system such as
            `gs://...`: copied to each worker's disk).
        dimensions: N, to keep the first N coordinates of each embedding, renormalised (1 to D); None: all D.
        title_key: the chunk `metadata` key of the document's title, embedded before its text as gtr-keras
            embeds a corpus document (None: the text alone).
        batch_size: documents per forward pass.
        max_batch_size: documents per `RunInference` batch, sorted by token length within it (default
            `16 * batch_size`).
        large_model: one model per machine, shared by the worker processes, instead of one per process.
        load_model_args: keyword arguments of `saving.load_model` on each worker (`dtype="bfloat16"`,
            `document_length=256`, ...).
        model_sha256: the model's fingerprint as the launching process read it: a worker that loads another
            model fails instead of embedding with it (default: not checked).

    Example:
    >>> embeddings = GTRTextEmbeddings("models/gtr-base", dimensions=256)  # doctest: +SKIP
    >>> chunks | MLTransform(write_artifact_location=tmp).with_transform(embeddings)  # doctest: +SKIP
    """

    def __init__(
        self,
        model,
        *,
        dimensions=None,
        title_key="title",
        batch_size=32,
        max_batch_size=None,
        large_model=False,
        load_model_args=None,
        model_sha256=None,
    ):
        adapter = EmbeddingTypeAdapter(
            input_fn=functools.partial(document_texts, title_key=title_key), output_fn=with_embeddings
        )
        super().__init__(
            type_adapter=adapter,
            load_model_args=load_model_args,
            max_batch_size=max_batch_size,
            large_model=large_model,
        )
        self.model = os.fspath(model)
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.model_sha256 = model_sha256

    def get_model_handler(self):
        return GTREmbeddingHandler(
            self.model,
            self.type_adapter,
            self.dimensions,
            batch_size=self.batch_size,
            group_size=self.max_batch_size,
            large_model=self.large_model,
            model_sha256=self.model_sha256,
            load_model_args=self.load_model_args,
        )

    def get_ptransform_for_processing(self, **kwargs):
        return RunInference(model_handler=self.get_model_handler()).with_output_types(EmbeddableItem)
