"""Search engines past one machine (docs/past-one-machine.md): an index pushed into Qdrant, Milvus or Vertex AI
Vector Search, kept in step with its updates, and searched back with the same model and filters.

`targets` (the one parser of `qdrant:PATH`, `qdrant+http://HOST:PORT`, `milvus:PATH.db`,
`milvus+http://HOST:PORT`, `vertex-ai:DIR`) and `engine` (`Engine`, one collection of one engine, with the
`Record` and `CollectionInfo` every engine writes and reads).

Internal: no public names; users call `Index.push` and `Index.open(TARGET, ...)`.
"""
