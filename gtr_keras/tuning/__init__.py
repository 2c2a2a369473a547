"""Search settings measured against exact search: `tuner` (`tune`: recall@k and QPS of each search setting of
an index on its own vectors, the fastest that meets a target recorded in the index) and `recall_curve`
(`plot_recall_qps`: recall-QPS curves drawn as ann-benchmarks draws them, with matplotlib)."""
