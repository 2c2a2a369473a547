"""Encoding a corpus apart from the index it goes into, with Apache Beam on any Beam runner: `beam_pipeline`
(corpus encoding into embedding files, and the index assembled from them), `rag_embeddings` (`GTRTextEmbeddings`,
a gtr-keras model as an `apache_beam.ml.rag` embeddings manager, for a user's own `MLTransform` pipeline) and
`engine_pipeline` (a corpus encoded into a Qdrant or Milvus collection by Beam's own writers: `encode --to`).

Public names: `GTRTextEmbeddings` (needs Apache Beam: `pip install 'gtr-keras[beam]'`).
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {"GTRTextEmbeddings": "gtr_keras.retrieval.encoding.rag_embeddings"},
)
