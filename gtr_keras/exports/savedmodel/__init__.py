"""The SavedModel exports: `export` (`export_encoder`, `export_searcher`, `export_all`), the searcher's graph
(`searcher_graph`, with `scann_resource` and `filter_graph`), the signatures' inputs and warmup requests
(`warmup`), the format's entry in the formats' table (`cli_adapter`) and `loader` (`load_export`)."""
