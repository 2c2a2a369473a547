"""`gtr-keras demo`: the whole product on a bundled collection, offline, in minutes.

It loads the small GTR bundled with the package (distilled from
all-MiniLM-L6-v2 by `recipes/distill_broad` on dictionaries, manual pages, Debian
package descriptions and MS MARCO passages, never trained on Cranfield), indexes the bundled
Cranfield collection (with its BM25 side), answers example queries, evaluates the model
zero-shot next to BM25 and the two fused (`fusion.model_fusion`: the model's own
fusion), and exports SavedModels that answer a raw query string.
"""

import os
import time

import tensorflow as tf

from gtr_keras.beir.dataset import load_dataset
from gtr_keras.beir.evaluation import evaluate_run, format_table
from gtr_keras.beir.readers import BUNDLED_COLLECTION_DIR
from gtr_keras.exports.savedmodel.export import export_encoder, export_searcher
from gtr_keras.exports.savedmodel.loader import load_export
from gtr_keras.exports.versions import check_export_outputs
from gtr_keras.lexical.fusion import model_fusion
from gtr_keras.models.gtr.presets import BUNDLED_MODEL_DIR
from gtr_keras.retrieval.index_building import build_index, check_index_outputs
from gtr_keras.retrieval.retriever import Retriever
from gtr_keras.retrieval.runs import EVALUATION_DEPTH, bm25_run, gtr_run
from gtr_keras.saving import load_model

DEMO_MODEL = BUNDLED_MODEL_DIR
DEMO_DATASET = BUNDLED_COLLECTION_DIR
EXAMPLE_QUERIES = ("1", "23", "157")


def run_demo(out_dir="gtr-demo", model_dir=DEMO_MODEL, dataset=DEMO_DATASET, k=3):
    """Runs the demo, writing the index and exports under `out_dir` (`out_dir/index`,
    `out_dir/export/{encoder,searcher}/1`; checked first to be missing or earlier outputs of the demo).

    Returns:
        `{"gtr": metrics, "bm25": metrics, "hybrid": metrics}` of the evaluation.

    Example:
    >>> run_demo("/tmp/gtr-demo")  # doctest: +SKIP
    """
    start = time.perf_counter()
    index_dir, export_dir = os.path.join(out_dir, "index"), os.path.join(out_dir, "export")
    check_index_outputs(index_dir)
    check_export_outputs(export_dir)
    encoder = load_model(model_dir)
    fusion = model_fusion(model_dir)
    corpus, queries, qrels, report = load_dataset(dataset)
    print(f"model: {model_dir} ({encoder.model.count_params():,} parameters, D={encoder.embedding_dim})")
    print(f"collection: {dataset}: {len(corpus)} documents, {len(queries)} judged queries ({report})\n")

    index = build_index(encoder, corpus, index_dir, model_dir=model_dir, progress=True)
    retriever = Retriever.load(index_dir, encoder)
    print(f"indexed into {index_dir} ({index.kind} search)\n")
    examples = list(EXAMPLE_QUERIES if set(EXAMPLE_QUERIES) <= set(queries) else queries)[: len(EXAMPLE_QUERIES)]
    for qid in examples:
        print(f"query {qid}: {queries[qid]}")
        for rank, hit in enumerate(retriever.search([queries[qid]], k)[0], start=1):
            mark = "relevant" if qrels[qid].get(hit["id"], 0) > 0 else "        "
            print(f"  {rank}. {mark} [{hit['score']:.3f}] doc {hit['id']}: {hit['title'][:90]}")
        print()

    runs = {"gtr": gtr_run(encoder, corpus, queries, index=index), "bm25": bm25_run(corpus, queries)}
    runs["hybrid"] = fusion.fuse_runs(runs["gtr"], runs["bm25"], EVALUATION_DEPTH)
    metrics = {name: evaluate_run(qrels, run) for name, run in runs.items()}
    search = "exact search" if index.kind == "exact" else "ScaNN search, approximate"
    print(
        f"zero-shot evaluation on all judged queries of {os.path.basename(os.path.normpath(dataset))} "
        f"(pytrec_eval; GTR by {search}):"
    )
    hybrid = f"GTR + BM25 ({fusion.method}, GTR weight {fusion.gtr_weight:g})"
    rows = [("GTR (this model)", metrics["gtr"]), ("BM25 (bm25s)", metrics["bm25"]), (hybrid, metrics["hybrid"])]
    print(format_table(rows))
    print(
        f"(a GTR of {encoder.model.count_params() / 1e6:.0f}M parameters on {os.cpu_count()} CPU cores, zero-shot on "
        "one collection: not the paper's GTR-Base..XXL (110M-4.8B parameters); docs/hybrid.md)\n"
    )

    encoder_dir = export_encoder(encoder, export_dir, version=1)
    searcher_dir = export_searcher(encoder, index_dir, export_dir, searcher="brute-force", version=1, k=k)
    answer = load_export(searcher_dir).signatures["serving_default"](queries=tf.constant([queries[examples[0]]]))
    ids = [i.decode() for i in answer["ids"].numpy()[0]]
    print(f"exported SavedModels to {encoder_dir} and {searcher_dir}")
    print(f"the searcher SavedModel answers query {examples[0]} with documents {ids}")
    print(f"\ndone in {time.perf_counter() - start:.0f} s")
    return metrics
