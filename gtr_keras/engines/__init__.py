"""Search engines past one machine (docs/past-one-machine.md): an index pushed into Qdrant, Milvus or Vertex AI
Vector Search, kept in step with its updates, and searched back with the same model and filters.

`targets` (the one parser of `qdrant:PATH`, `qdrant+http://HOST:PORT`, `milvus:PATH.db`,
`milvus+http://HOST:PORT`, `vertex-ai:DIR`), `engine` (`Engine`, one collection of one engine, with the
`Record` and `CollectionInfo` every engine writes and reads), `registry` (`open_engine`: a target's engine,
imported when asked for), `qdrant_engine` (`QdrantEngine` and the translation of filters to Qdrant's),
`push` (an index's live documents sent, only the diff since the last push, with its ledger) and `engine_index`
(`EngineIndex`: a collection searched and updated as an `Index`).

Internal: no public names; users call `Index.push` and `Index.open(TARGET, ...)`.
"""
