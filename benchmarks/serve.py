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

Usage:
    PYTHONPATH=. python benchmarks/serve.py
    PYTHONPATH=. python benchmarks/serve.py --max-wait-ms 0 2 5 --rounds 3 --requests 512 --docs-per-request 1
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
from results import RESULTS, machine, publish, rerun_command

import gtr_keras
from gtr_keras.beir import load_corpus, load_queries
from gtr_keras.models import BUNDLED_MODEL_DIR
from gtr_keras.retrieval import Retriever, build_index

SECTION = "## Serve"
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


def start_server(index_dir, port, batch_size, max_wait_ms):
    command = [sys.executable, "-m", "gtr_keras", "serve", "--model", "gtr-small-distilled", "--index", index_dir]
    command += ["--port", str(port), "--batch-size", str(batch_size), "--max-wait-ms", str(max_wait_ms)]
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
    parser.add_argument("--no-record", action="store_true", help=f"print only, do not append to {RESULTS}")
    parser.add_argument("--results", default=RESULTS)
    args = parser.parse_args()

    corpus, queries = load_corpus(CRANFIELD), list(load_queries(CRANFIELD).values())
    documents = corpus.joined()
    need = args.requests * args.docs_per_request
    documents = (documents * (need // len(documents) + 1))[:need]
    doc_bodies = [
        {"input": documents[i : i + args.docs_per_request], "model": "gtr-small-distilled", "encoding_format": "base64"}
        for i in range(0, need, args.docs_per_request)
    ]
    queries = (queries * (args.searches // len(queries) + 1))[: args.searches]
    search_bodies = [{"query": query, "k": 10} for query in queries]
    encoder = gtr_keras.load("gtr-small-distilled")
    temporary = tempfile.TemporaryDirectory(prefix="serve-bench-")
    index_dir = args.index or os.path.join(temporary.name, "index")
    if not args.index:
        build_index(encoder, corpus, index_dir, model_dir="gtr-small-distilled")
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
        f"- Model `gtr-small-distilled` (4 layers, d_model 256, documents truncated at {encoder.document_length} "
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
