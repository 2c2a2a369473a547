"""Benchmarks `gtr-keras serve`: a bounded load test against 127.0.0.1, beside the model in-process.

Starts the real command (`gtr-keras serve --model M --index I --port P`, a free
port) once per `--max-wait-ms` value, and for 1, 8 and 32 concurrent clients
(aiohttp, one keep-alive connection each: httpx's async client managed 164
requests/s of /health at 32 connections on this machine, aiohttp 2,000) sends a
fixed number of requests, then stops: `/v1/embeddings` with `--docs-per-request` Cranfield
documents each (`encoding_format` base64, what the `openai` client asks for), and
`/v1/search` with one Cranfield query each (`retriever` gtr, k 10). It reports
requests/s, documents (or queries) a second and p50/p99 latency. Between the
server's runs, with the server idle, the same documents are encoded in this
process by `encode_documents` in batches of `--batch-size` in the order the
server receives them ("in-process, arrival-order batches"), and all at once
(length-sorted batches), and the same queries searched in-process
(`Retriever.search`, batches of `--batch-size`): the runs take turns.

The target: the server's documents/s at 32 clients >= 85% of the in-process
arrival-order batches' of the same turn (searches: of `Retriever.search`'s).
Prints a table and appends it, with the command and the lscpu flags, to the
"## Serve" section of benchmarks/RESULTS.md.

`--mixed` runs the production load instead: `--clients` (64) concurrent clients
send a fixed list of `--total` (10,000) requests of mixed endpoints and lengths
(embeddings of 1 to 4 Cranfield documents or queries, as documents or as
queries; gtr, bm25 and hybrid searches), to servers of three settings that
take turns, `--rounds` times: `plain` (no key, no scrape: today's count
batching, `--batch-size`), `keys+metrics` (`--api-key`, every request with the
key, and /metrics scraped through it every second, as Prometheus would), and
`tokens` (`--max-batch-tokens`, `--token-batch-size` texts a pass at most: the
same bound of padded tokens a pass as `plain`'s `--batch-size` texts of the
document budget). For each: requests/s, p50/p99 latency, the server's RSS
after a warm-up and at the end, and failed requests (none allowed). The goals:
RSS growth over the run < 5%, keys and metrics cost < 3% of `plain`'s
requests/s (medians of the rounds); each said met or not.

Usage:
    PYTHONPATH=. python benchmarks/serve.py
    PYTHONPATH=. python benchmarks/serve.py --max-wait-ms 0 2 5 --rounds 3 --requests 512 --docs-per-request 1
    PYTHONPATH=. python benchmarks/serve.py --mixed --total 10000 --clients 64 --rounds 2
"""

import argparse
import asyncio
import datetime
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import aiohttp
import httpx
import numpy as np
from results import RESULTS, machine, publish, rerun_command, resident_bytes

import gtr_keras
from gtr_keras.beir import load_corpus, load_queries
from gtr_keras.models import BUNDLED_MODEL_DIR
from gtr_keras.retrieval.index_building import build_index
from gtr_keras.retrieval.retriever import Retriever

SECTION = "## Serve"
BUNDLED = "gtr_small_distilled_en"
CRANFIELD = os.path.join(os.path.dirname(BUNDLED_MODEL_DIR), "cranfield")
CLIENTS = (1, 8, 32)


def cpu_flags():
    """The SIMD flags of this CPU that TensorFlow's kernels use (from `lscpu`)."""
    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    flags = set(re.search(r"Flags:\s*(.*)", text)[1].split()) if "Flags:" in text else set()
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile")
    return ", ".join(flag for flag in wanted if flag in flags) or "none"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(index_dir, port, batch_size, max_wait_ms, extra=()):
    command = [sys.executable, "-m", "gtr_keras", "serve", "--model", BUNDLED, "--index", index_dir]
    command += ["--port", str(port), "--batch-size", str(batch_size), "--max-wait-ms", str(max_wait_ms), *extra]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            if server.poll() is not None:
                raise SystemExit(f"the server exited with {server.returncode}") from None
            time.sleep(0.25)
    server.kill()
    raise SystemExit("the server did not answer /health within 120 s")


def stop_server(server):
    server.terminate()
    server.wait(timeout=60)
    if server.returncode != 0:
        raise SystemExit(f"the server exited with {server.returncode} at SIGTERM")


async def load_test(url, bodies, clients):
    """Sends every body of `bodies` (in order, `clients` at a time); returns (wall seconds, latencies)."""
    latencies, failures, next_body = [], [], iter(bodies)
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:

        async def one_client():
            for body in next_body:
                start = time.perf_counter()
                async with session.post(url, json=body) as response:
                    text = await response.read()
                    latencies.append(time.perf_counter() - start)
                    if response.status != 200:
                        failures.append(text.decode())

        start = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        wall = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{len(failures)} requests failed, the first: {failures[0]}")
    return wall, np.array(latencies)


KEY = "sk-benchmark"
SETTINGS = ("plain", "keys+metrics", "tokens")


def mixed_requests(documents, queries, total, seed=0):
    """A fixed list of `total` `(path, body)`: 60% embeddings of 1 to 4 documents or queries (as documents, or
    as queries: `input_type`), 40% searches (gtr, bm25, hybrid; k 10)."""
    rng = np.random.default_rng(seed)
    requests = []
    for _ in range(total):
        if rng.random() < 0.6:
            pool = documents if rng.random() < 0.5 else queries
            texts = [pool[i] for i in rng.integers(0, len(pool), size=int(rng.integers(1, 5)))]
            body = {"input": texts, "model": BUNDLED, "encoding_format": "base64"}
            if rng.random() < 0.3:
                body["input_type"] = "query"
            requests.append(("/v1/embeddings", body))
        else:
            query = queries[int(rng.integers(0, len(queries)))]
            retriever = ("gtr", "gtr", "bm25", "hybrid")[int(rng.integers(0, 4))]
            requests.append(("/v1/search", {"query": query, "k": 10, "retriever": retriever}))
    return requests


async def mixed_load(base, requests, clients, headers, scrape):
    """Sends every request of `requests` (`clients` at a time) to `base`, scraping /metrics every second if
    `scrape`; returns (wall seconds, latencies, failures)."""
    latencies, failures, pending = [], [], iter(requests)
    connector = aiohttp.TCPConnector(limit=clients + 1)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:
        done = asyncio.Event()

        async def one_client():
            for path, body in pending:
                start = time.perf_counter()
                try:
                    async with session.post(f"{base}{path}", json=body) as response:
                        text = await response.read()
                        if response.status != 200:
                            failures.append(f"{response.status} {text[:200].decode(errors='replace')}")
                except aiohttp.ClientError as error:
                    failures.append(repr(error))
                latencies.append(time.perf_counter() - start)

        async def scraper():
            while not done.is_set():
                async with session.get(f"{base}/metrics") as response:
                    await response.read()
                    if response.status != 200:
                        failures.append(f"/metrics: {response.status}")
                try:
                    await asyncio.wait_for(done.wait(), 1.0)
                except TimeoutError:
                    pass

        scraping = asyncio.ensure_future(scraper()) if scrape else None
        start = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        wall = time.perf_counter() - start
        done.set()
        if scraping:
            await scraping
    return wall, np.array(latencies), failures


def run_mixed(args, documents, queries, index_dir):
    """The `--mixed` load: each setting of `SETTINGS` in turn, `--rounds` times; a table for RESULTS.md."""
    requests = mixed_requests(documents, queries, args.total)
    extras = {
        "plain": [],
        "keys+metrics": ["--api-key", KEY],
        "tokens": ["--max-batch-tokens", str(args.max_batch_tokens), "--batch-size", str(args.token_batch_size)],
    }
    rows = []
    for turn in range(args.rounds):
        for setting in SETTINGS:
            port = free_port()
            server = start_server(index_dir, port, args.batch_size, 0.0, extras[setting])
            base, keyed = f"http://127.0.0.1:{port}", setting == "keys+metrics"
            headers = {"authorization": f"Bearer {KEY}"} if keyed else {}
            try:
                asyncio.run(mixed_load(base, requests[: args.clients * 2], args.clients, headers, False))  # warm-up
                rss_start = resident_bytes(server.pid)
                wall, latencies, failures = asyncio.run(mixed_load(base, requests, args.clients, headers, keyed))
                rss_end = resident_bytes(server.pid)
            finally:
                stop_server(server)
            rows.append(
                {
                    "turn": turn,
                    "setting": setting,
                    "requests_s": len(requests) / wall,
                    "p50_ms": float(np.percentile(latencies, 50) * 1000),
                    "p99_ms": float(np.percentile(latencies, 99) * 1000),
                    "rss_start": rss_start,
                    "rss_end": rss_end,
                    "failures": len(failures),
                }
            )
            print(f"{setting}, turn {turn + 1}: {rows[-1]}", file=sys.stderr)
            if failures:
                print(f"  the first failure: {failures[0]}", file=sys.stderr)
    return rows


def mixed_report(args, rows, load_before):
    """The `--mixed` run's section of RESULTS.md: the table, and the goals said met or not."""
    median = {s: float(np.median([r["requests_s"] for r in rows if r["setting"] == s])) for s in SETTINGS}
    cost = 1 - median["keys+metrics"] / median["plain"]
    growth = max((r["rss_end"] - r["rss_start"]) / r["rss_start"] for r in rows)
    failed = sum(r["failures"] for r in rows)
    lines = [
        f"### {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC: gtr-keras serve, mixed load, {args.clients} "
        "clients",
        "",
        f"Command: `{rerun_command(__file__)}`",
        "",
        f"- Machine: {machine()}; lscpu flags: {cpu_flags()}; 1-min load average {load_before:.2f} before and "
        f"{os.getloadavg()[0]:.2f} after (the load test's client runs on the same cores as the server).",
        f"- {args.total:,} requests per run, {args.clients} concurrent clients (aiohttp, keep-alive): 60% "
        "embeddings of 1 to 4 Cranfield documents or queries, 40% searches (gtr, bm25, hybrid; k 10), exact "
        f"index of the 1,400 Cranfield documents, model `gtr_small_distilled_en`. plain: --batch-size "
        f"{args.batch_size}; keys+metrics: --api-key, /metrics scraped every second; tokens: --max-batch-tokens "
        f"{args.max_batch_tokens} --batch-size {args.token_batch_size}. Settings take turns, {args.rounds} rounds.",
        "",
        "| turn | setting | requests/s | p50 ms | p99 ms | RSS after warm-up MB | RSS at end MB | growth | failed |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['turn'] + 1} | {r['setting']} | {r['requests_s']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
            f"{r['rss_start'] / 2**20:.1f} | {r['rss_end'] / 2**20:.1f} | "
            f"{(r['rss_end'] - r['rss_start']) / r['rss_start']:+.1%} | {r['failures']} |"
        )
    short = "" if args.total >= 10_000 else "; fewer than the 10,000 requests the goal names"
    lines += [
        "",
        f"- Failed requests: {failed} (goal 0: {'met' if failed == 0 else 'NOT met'}).",
        f"- RSS growth over {args.total:,} requests, the largest of the runs: {growth:+.1%} (goal < 5%: "
        f"{'met' if growth < 0.05 else 'NOT met'}{short}).",
        f"- Keys and metrics: {median['keys+metrics']:.1f} requests/s against plain's {median['plain']:.1f} "
        f"(medians), a cost of {cost:.1%} (goal < 3%: {'met' if cost < 0.03 else 'NOT met'}).",
        f"- Token-budget batching: {median['tokens']:.1f} requests/s against count batching's "
        f"{median['plain']:.1f} ({median['tokens'] / median['plain']:.0%}).",
    ]
    return "\n".join(lines)


def row(name, clients, wall, latencies, items, unit, turn):
    return {
        "name": name,
        "turn": turn,
        "clients": clients,
        "requests_s": len(latencies) / wall,
        "items_s": items / wall,
        "unit": unit,
        "p50_ms": float(np.percentile(latencies, 50) * 1000) if len(latencies) else None,
        "p99_ms": float(np.percentile(latencies, 99) * 1000) if len(latencies) else None,
    }


def timed(function):
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", help="the demo's index (default: built here from the bundled Cranfield)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, nargs="+", default=[0.0, 2.0], help="server settings to compare")
    parser.add_argument("--requests", type=int, default=512, help="embedding requests per client count")
    parser.add_argument("--docs-per-request", type=int, default=1)
    parser.add_argument("--searches", type=int, default=512, help="search requests per client count")
    parser.add_argument("--rounds", type=int, default=2, help="turns of in-process and server runs")
    parser.add_argument("--mixed", action="store_true", help="the mixed production load instead (module doc)")
    parser.add_argument("--total", type=int, default=10_000, help="--mixed: requests per run")
    parser.add_argument("--clients", type=int, default=64, help="--mixed: concurrent clients")
    parser.add_argument("--max-batch-tokens", type=int, default=4096, help="--mixed: the tokens setting's budget")
    parser.add_argument("--token-batch-size", type=int, default=128, help="--mixed: the tokens setting's texts a pass")
    parser.add_argument("--no-record", action="store_true", help=f"print only, do not append to {RESULTS}")
    parser.add_argument("--results", default=RESULTS)
    args = parser.parse_args()

    corpus, queries = load_corpus(CRANFIELD), list(load_queries(CRANFIELD).values())
    documents = corpus.joined()
    need = args.requests * args.docs_per_request
    documents = (documents * (need // len(documents) + 1))[:need]
    doc_bodies = [
        {"input": documents[i : i + args.docs_per_request], "model": BUNDLED, "encoding_format": "base64"}
        for i in range(0, need, args.docs_per_request)
    ]
    queries = (queries * (args.searches // len(queries) + 1))[: args.searches]
    search_bodies = [{"query": query, "k": 10} for query in queries]
    encoder = gtr_keras.load(BUNDLED)
    temporary = tempfile.TemporaryDirectory(prefix="serve-bench-")
    index_dir = args.index or os.path.join(temporary.name, "index")
    if not args.index:
        build_index(encoder, corpus, index_dir, model_dir=BUNDLED)
    if args.mixed:
        load_before = os.getloadavg()[0]
        rows = run_mixed(args, corpus.joined(), list(load_queries(CRANFIELD).values()), index_dir)
        publish(mixed_report(args, rows, load_before), args.results, SECTION, not args.no_record)
        return
    retriever = Retriever.load(index_dir, encoder)
    size = args.batch_size
    encoder.encode_documents(documents[: 2 * size], size)  # warm-up: the traced graph
    load_before = os.getloadavg()[0]

    rows = []
    for turn in range(args.rounds):
        seconds = timed(lambda: [encoder.encode_documents(documents[i : i + size], size) for i in range(0, need, size)])
        rows.append(row("in-process encode_documents, arrival-order batches", "-", seconds, [], need, "docs", turn))
        seconds = timed(lambda: encoder.encode_documents(documents, size))
        rows.append(row("in-process encode_documents, length-sorted batches", "-", seconds, [], need, "docs", turn))
        seconds = timed(lambda: [retriever.search(queries[i : i + size], 10) for i in range(0, len(queries), size)])
        rows.append(row("in-process Retriever.search, batches", "-", seconds, [], len(queries), "queries", turn))
        for max_wait_ms in args.max_wait_ms:
            port = free_port()
            server = start_server(index_dir, port, size, max_wait_ms)
            try:
                base = f"http://127.0.0.1:{port}"
                asyncio.run(load_test(f"{base}/v1/embeddings", doc_bodies[:64], 8))  # warm-up
                for clients in CLIENTS:
                    wall, latencies = asyncio.run(load_test(f"{base}/v1/embeddings", doc_bodies, clients))
                    name = f"server /v1/embeddings, --max-wait-ms {max_wait_ms:g}"
                    rows.append(row(name, clients, wall, latencies, need, "docs", turn))
                for clients in CLIENTS:
                    wall, latencies = asyncio.run(load_test(f"{base}/v1/search", search_bodies, clients))
                    name = f"server /v1/search gtr, --max-wait-ms {max_wait_ms:g}"
                    rows.append(row(name, clients, wall, latencies, len(queries), "queries", turn))
                batches = httpx.get(f"{base}/health").json()["batches"]
            finally:
                stop_server(server)
            print(f"--max-wait-ms {max_wait_ms:g}: {batches} batches", file=sys.stderr)

    # Each turn's runs against that turn's in-process run: the machine's load changes between turns.
    reference = {r["turn"]: r["items_s"] for r in rows if r["name"].endswith("arrival-order batches")}
    in_process = {r["turn"]: r["items_s"] for r in rows if r["name"].startswith("in-process Retriever")}
    lines = [
        f"### {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC: gtr-keras serve, bundled model, Cranfield",
        "",
        f"Command: `{rerun_command(__file__)}`",
        "",
        f"- Machine: {machine()}; lscpu flags: {cpu_flags()}; 1-min load average {load_before:.2f} before and "
        f"{os.getloadavg()[0]:.2f} after the run (the machine is shared with other sessions' jobs, the load "
        "test's client runs on the same 2 cores as the server).",
        f"- Model `gtr_small_distilled_en` (4 layers, d_model 256, documents truncated at {encoder.document_length} "
        f"tokens), --batch-size {size}; {need} documents ({args.docs_per_request} a request, base64) and "
        f"{len(queries)} searches (one query, k 10, exact index of the 1,400 Cranfield documents) per client count.",
        "",
        "| turn | run | clients | requests/s | items/s | p50 ms | p99 ms | vs in-process, same turn |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        base = reference if r["unit"] == "docs" else in_process
        share = f"{r['items_s'] / base[r['turn']]:.0%}"
        p50 = "" if r["p50_ms"] is None else f"{r['p50_ms']:.1f}"
        p99 = "" if r["p99_ms"] is None else f"{r['p99_ms']:.1f}"
        requests = "" if r["clients"] == "-" else f"{r['requests_s']:.1f}"
        lines.append(
            f"| {r['turn'] + 1} | {r['name']} | {r['clients']} | {requests} | {r['items_s']:.1f} {r['unit']} | {p50} | "
            f"{p99} | {share} |"
        )
    publish("\n".join(lines), args.results, SECTION, not args.no_record)


if __name__ == "__main__":
    main()
