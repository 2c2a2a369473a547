"""BEIR data and evaluation: `readers` (BEIR collections), `text_inputs` (the texts `gtr-keras encode`
embeds), `qrels_checks` (judgements checked against a collection), `dataset`
(`gtr_keras.load_dataset`: a collection's corpus, judged queries and checked qrels) and `evaluation`
(pytrec_eval metrics, TREC run files). Imports nothing of gtr-keras but `utils`.

Public names (imported on first use): `load_corpus`, `load_queries`, `load_qrels`, `evaluate_run`, `read_trec_run`,
`write_trec_run`, `BUNDLED_COLLECTION_DIR` (the Cranfield collection bundled with the package); `Corpus` and
`load_dataset` are `gtr_keras`'.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "load_corpus": "gtr_keras.beir.readers",
        "load_queries": "gtr_keras.beir.readers",
        "load_qrels": "gtr_keras.beir.readers",
        "evaluate_run": "gtr_keras.beir.evaluation",
        "read_trec_run": "gtr_keras.beir.evaluation",
        "write_trec_run": "gtr_keras.beir.evaluation",
        "BUNDLED_COLLECTION_DIR": "gtr_keras.beir.readers",
    },
)
