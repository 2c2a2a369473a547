"""Search settings measured against exact search: `tuner` (`tune`: recall@k and QPS of each search setting of
an index against exact float32 search on half the queries, the fastest that meets a target on the other half
recorded in the index) and `recall_curve`
(`plot_recall_qps`: recall-QPS curves drawn as ann-benchmarks draws them, with matplotlib)."""
