"""Retrieval: `readers` (BEIR collections and text files), `index` (`SearchIndex`: exact or ScaNN),
`shards` (`ShardWriter`, resumable encode shards), `retriever` (index directories: build, load, search),
`runs` (runs over a collection, BM25 beside GTR, hard-negative mining), `evaluation` (pytrec_eval
metrics, TREC run files), `bm25` (the bm25s baseline) and `beam_pipeline` (corpus encoding with Apache
Beam)."""
