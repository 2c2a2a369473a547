"""`search --rerank` and `evaluate --rerank`: the first stage's top N (GTR, BM25 or hybrid, filters included)
ordered by the reranker's scores of those pairs, and a row per stage."""

import json

import pytest

import gtr_keras
from gtr_keras.cli.main import main

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
QUERY = "boundary layer heat transfer"


def documents(n=24):
    return [
        {
            "_id": f"d{i}",
            "title": f"Title {i}",
            "text": " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + i % 9)),
            "metadata": {"year": 2000 + i % 4},
        }
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def index(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("rerank")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in documents()))
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(root / "idx")]) == 0
    return str(root / "idx")


def hits(capsys, *argv):
    capsys.readouterr()
    assert main(["search", *argv, "--json", QUERY]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["query"] == QUERY
    return result["hits"]


@pytest.mark.parametrize(
    "retriever, flags",
    [
        ("gtr", ["--filter", "year >= 2002"]),
        pytest.param("gtr", [], marks=pytest.mark.large),
        pytest.param("bm25", [], marks=pytest.mark.large),
        pytest.param("hybrid", ["--filter", "year < 2003"], marks=pytest.mark.large),
    ],
)
def test_search_reranks_the_first_stages_top_n_by_the_rerankers_scores(
    index,
    tiny_model_dir,
    reranker_dirs,
    capsys,
    retriever,
    flags,
):
    first = ["--index", index, "--model", tiny_model_dir, "--retriever", retriever, *flags]
    top = hits(capsys, *first, "-k", "7")
    reranked = hits(capsys, *first, "--rerank", reranker_dirs["bert"], "--rerank-depth", "7")
    assert sorted(h["id"] for h in reranked) == sorted(h["id"] for h in top) and len(top) == 7
    assert [sorted(h) for h in reranked] == [sorted(h) for h in top]  # the same fields: id, score, title, text
    scores = gtr_keras.load(reranker_dirs["bert"]).predict([(QUERY, f"{h['title']} {h['text']}") for h in reranked])
    assert [h["score"] for h in reranked] == pytest.approx(scores.tolist(), abs=1e-6)
    assert scores.tolist() == sorted(scores.tolist(), reverse=True)
    assert [
        h["id"] for h in hits(capsys, *first, "--rerank", reranker_dirs["bert"], "--rerank-depth", "7", "-k", "3")
    ] == [h["id"] for h in reranked[:3]]


def test_evaluate_prints_a_row_per_stage(tmp_path, reranker_dirs, capsys):
    collection = tmp_path / "beir"
    (collection / "qrels").mkdir(parents=True)
    (collection / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in documents()))
    queries = {"q1": QUERY, "q2": "wing lift drag"}
    (collection / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items())
    )
    (collection / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\nq2\td0\t1\n")
    out = tmp_path / "metrics.json"
    argv = ["evaluate", "--dataset", str(collection), "--retriever", "bm25", "--output-json", str(out)]
    assert main([*argv, "--rerank", reranker_dirs["xlmr"], "--rerank-depth", "5"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.split()[:4] for line in table[1:]] == [
        ["beir", "test", "bm25"] + table[1].split()[3:4],
        ["beir", "test", "bm25", "+"],
    ]
    record = json.loads(out.read_text())
    assert record["rerank"]["depth"] == 5 and set(record["rerank"]["first_stage_metrics"]) == set(record["metrics"])


def test_rerank_is_refused_before_any_model_loads(index, tiny_model_dir, capsys):
    assert main(["search", "--index", index, "--model", tiny_model_dir, "--rerank", tiny_model_dir, QUERY]) == 2
    assert "--rerank: " in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["search", "--index", index, "--retriever", "bm25", "--rerank-depth", "5", QUERY])
    assert stopped.value.code == 2 and "argument --rerank-depth: goes with --rerank" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(
            [
                "search",
                "--index",
                index,
                "--retriever",
                "bm25",
                "--rerank",
                tiny_model_dir,
                "-k",
                "10",
                "--rerank-depth",
                "5",
                QUERY,
            ]
        )
    assert stopped.value.code == 2 and "argument --rerank-depth: 5 is below -k 10" in capsys.readouterr().err
