import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()


def test_msmarco_tpu_recipe_runs_on_cpu_with_gtr_tiny(tmp_path):
    triples = tmp_path / "triples.tsv"
    lines = []
    for i in range(64):
        words = [WORDS[(i * 7 + j) % len(WORDS)] for j in range(6)]
        lines.append(f"{' '.join(words[:3])} {i}\t{' '.join(words)} passage {i}\t{' '.join(reversed(words))} other {i}")
    triples.write_text("\n".join(lines) + "\n")
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": line.split("\t")[1]}) + "\n"
                                               for i, line in enumerate(lines)))
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": line.split("\t")[0]}) + "\n"
                                                for i, line in enumerate(lines[:10])))
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(10)))
    out = tmp_path / "run"
    command = [sys.executable, os.path.join(REPO, "recipes", "msmarco_tpu", "train_msmarco.py"),
               "--init", "gtr-tiny", "--triples", str(triples), "--output-dir", str(out), "--steps", "4",
               "--batch-size", "8", "--document-length", "32", "--query-length", "16", "--eval-dataset", str(beir)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.path.exists(out / "model" / "model.weights.h5")
    metrics = json.loads((out / "eval.json").read_text())["metrics"]
    assert set(metrics) == {"ndcg@10", "mrr@10", "recall@100", "recall@1000", "map"}
    assert metrics["recall@100"] == 1.0  # 64 documents: all retrieved


def test_notebook_runs_the_recipe_script():
    with open(os.path.join(REPO, "recipes", "msmarco_tpu", "msmarco_tpu.ipynb")) as f:
        notebook = json.load(f)
    source = "".join("".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code")
    assert "recipes/msmarco_tpu/train_msmarco.py" in source and "--strategy tpu" in source
    assert notebook["metadata"]["accelerator"] == "TPU"
