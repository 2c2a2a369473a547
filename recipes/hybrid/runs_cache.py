"""Phase 1 of the hybrid recipe: GTR and BM25 runs (depth 1000) per collection and split, cached as TREC files."""

import os
import sys
import time

from gtr_keras.models.gtr.presets import BUNDLED_MODEL_DIR
from gtr_keras.models.gtr.saving import load
from gtr_keras.retrieval.evaluation import write_trec_run
from gtr_keras.retrieval.runs import bm25_run, gtr_run, load_dataset
from gtr_keras.retrieval.search_index import SearchIndex

SPLITS = {
    "scifact": ("train", "test"),
    "nfcorpus": ("dev", "test"),
    "cranfield": ("test",),
    "cisi": ("test",),
    "msmarco-dl19-subset": ("test",),
}

data, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
encoder = load(BUNDLED_MODEL_DIR)
for name, splits in SPLITS.items():
    index = None
    for split in splits:
        corpus, queries, qrels, _ = load_dataset(os.path.join(data, name), split)
        if index is None:
            start = time.perf_counter()
            index = SearchIndex(corpus.ids, encoder.encode_documents(corpus.joined(), 32, False), "exact")
            print(name, "encoded", len(corpus), f"{time.perf_counter() - start:.1f}s", flush=True)
        for side, run in (("gtr", gtr_run(encoder, corpus, queries, index=index)), ("bm25", bm25_run(corpus, queries))):
            write_trec_run(os.path.join(out, f"{name}.{split}.{side}.trec"), run, tag=side)
        print(name, split, len(queries), "queries", flush=True)
