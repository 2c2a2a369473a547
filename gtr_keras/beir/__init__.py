"""BEIR data and evaluation: `readers` (BEIR collections), `text_inputs` (the texts `gtr-keras encode`
embeds), `qrels_checks` (judgements checked against a collection), `dataset`
(`gtr_keras.load_dataset`: a collection's corpus, judged queries and checked qrels) and `evaluation`
(pytrec_eval metrics, TREC run files). Imports nothing of gtr-keras but `utils`.

Public names (imported on first use): `Corpus`, `load_corpus`, `load_queries`, `load_qrels`, `CORPUS_FILES`,
`in_collection`, `BUNDLED_COLLECTION_DIR` (the Cranfield collection bundled with the package), `evaluate_run`,
`per_query_metrics`, `format_table`, `median_length_analysis`, `cut_run`, `results_from_scores`, `read_trec_run`,
`write_trec_run`.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "Corpus": "gtr_keras.beir.readers",
        "load_corpus": "gtr_keras.beir.readers",
        "load_queries": "gtr_keras.beir.readers",
        "load_qrels": "gtr_keras.beir.readers",
        "CORPUS_FILES": "gtr_keras.beir.readers",
        "in_collection": "gtr_keras.beir.readers",
        "BUNDLED_COLLECTION_DIR": "gtr_keras.beir.readers",
        "evaluate_run": "gtr_keras.beir.evaluation",
        "per_query_metrics": "gtr_keras.beir.evaluation",
        "format_table": "gtr_keras.beir.evaluation",
        "median_length_analysis": "gtr_keras.beir.evaluation",
        "cut_run": "gtr_keras.beir.evaluation",
        "results_from_scores": "gtr_keras.beir.evaluation",
        "read_trec_run": "gtr_keras.beir.evaluation",
        "write_trec_run": "gtr_keras.beir.evaluation",
    },
)
