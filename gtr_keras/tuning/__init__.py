"""Search settings measured against exact search: `tuner` (`tune`: recall@k and QPS of each search setting of
an index against exact float32 search on half the queries, the fastest that meets a target on the other half
recorded in the index), `recall` (recall@k and QPS measured against exact search) and `recall_curve`
(`plot_recall_qps`: recall-QPS curves drawn as ann-benchmarks draws them, with matplotlib).

Public names: `plot_recall_qps` (the plot of a tuning's record); tuning itself is `Index.tune`.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "plot_recall_qps": "gtr_keras.tuning.recall_curve",
    },
)
