"""`gtr-keras serve`: embeddings, search and reranking over HTTP, in OpenAI's (and Cohere's) schema, on uvicorn
and Starlette.

`app` (the routes), `validation` (request bodies), `api_error` (OpenAI's error
shape), `batcher` (texts of concurrent requests encoded together, each request
judged alone), `rerank_scoring` (the reranker's batches of pairs), `deadlines`
(every wait of a request bounded), `connections` (every connection bounded),
`live_index` (an `Index` of the index's newest generation) and `serve` (the
command: model, server, signals); `gateway/`, what every request passes
whatever its route (keys, request ids, access log, metrics, traces).
"""
