"""`distill`: a GTR student learns a teacher's in-batch similarities, in `train`'s loop."""

import gzip
import json
import re
import signal
import subprocess
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from training_inputs import SPIECE, WORDS, final_weights, run_python

from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.models.gtr.preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.models.gtr.text_embedder import GTRTextEmbedder
from gtr_keras.models.gtr.tokenizer import GTRTokenizer
from gtr_keras.training.distillation import DistillationTexts, DistillConfig, distill
from gtr_keras.training.losses import SimilarityDistillationLoss
from gtr_keras.training.teachers import load_teacher


def word_pairs(count, seed):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(count):
        a, b, c, d = rng.choice(WORDS, 4, replace=False)
        pairs.append({"query": f"{a} {b} {c}", "positive": f"the {a} and {b} with {d} {c}"})
    return pairs


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(record) + "\n" for record in records)
    return str(path)


def tiny_distillation(tmp_path, teacher, **settings):
    """Settings of a 1-block gtr-tiny student on 40 pairs and 8 single texts, two checkpoints of 2 steps."""
    texts = [write_jsonl(tmp_path / "pairs.jsonl", word_pairs(40, 0)), str(tmp_path / "single.txt")]
    (tmp_path / "single.txt").write_text("\n".join(f"{w} by the {w} river" for w in WORDS[:8]) + "\n")
    return {
        "init": "gtr-tiny", "tokenizer": SPIECE, "model": {"num_layers": 1}, "teacher": teacher,
        "data": {"texts": texts, "query_length": 8, "document_length": 16}, "steps": 4, "batch_size": 8,
        "checkpoint_every": 2, "learning_rate": 0.01, "mse_weight": 1.0, "verbose": 0,
        "output_dir": str(tmp_path / "run"), **settings,
    }


def test_the_student_gets_closer_to_the_teacher_on_held_texts(tiny_model_dir, tmp_path):
    held = word_pairs(32, 1)
    queries, documents = [p["query"] for p in held], [p["positive"] for p in held]
    teacher = load_teacher(tiny_model_dir)
    teacher_queries, teacher_documents = teacher.encode_queries(queries), teacher.encode_documents(documents)
    gap = SimilarityDistillationLoss(0.05, 0.05)

    def distance(encoder):
        """KL of the student's in-batch score distributions from the teacher's, on the held pairs."""
        return float(gap(encoder.encode_queries(queries), encoder.encode_documents(documents),
                         teacher_queries, teacher_documents, single=tf.zeros([len(held)], tf.bool)))

    keras.utils.set_random_seed(0)  # the student's initial weights, as `distill` draws them with seed 0
    tokenizer = GTRTokenizer(open(SPIECE, "rb").read())
    untrained = GTRTextEmbedder.from_architecture(
        "gtr-tiny", num_layers=1, preprocessor=GTRTextEmbedderPreprocessor(tokenizer, 16, 8))
    before = distance(untrained.batch_encoder())
    texts = write_jsonl(tmp_path / "train.jsonl", word_pairs(200, 0))
    student = distill({
        "init": "gtr-tiny", "tokenizer": SPIECE, "model": {"num_layers": 1}, "teacher": tiny_model_dir,
        "data": {"texts": [texts], "query_length": 8, "document_length": 16}, "steps": 60, "batch_size": 16,
        "checkpoint_every": 60, "learning_rate": 0.01, "verbose": 0, "output_dir": str(tmp_path / "run"),
    })
    after = distance(student)
    assert after < 0.5 * before, (before, after)  # measured: 1.72 -> 0.27


def test_a_rerun_with_changed_texts_is_refused_before_the_teacher_runs(tiny_model_dir, tmp_path, monkeypatch):
    config = tiny_distillation(tmp_path, tiny_model_dir)
    distill(config)
    shards = sorted((tmp_path / "run" / "teacher_embeddings").rglob("shard-*.npz"))
    assert [p.parent.name for p in shards] == ["documents", "queries"]
    monkeypatch.setattr("gtr_keras.training.teachers.load_teacher", lambda *a, **k: pytest.fail("teacher loaded"))
    pairs = word_pairs(40, 0)
    pairs[3]["positive"] = "another text"
    write_jsonl(tmp_path / "pairs.jsonl", pairs)
    with pytest.raises(MismatchError, match=r"the training data .*pairs.jsonl changed since the run started"):
        distill(config)


def test_a_cache_is_reused_and_one_of_other_texts_is_refused_naming_the_shard(tiny_model_dir, tmp_path, monkeypatch):
    from gtr_keras.training.distillation import teacher_embeddings

    teacher = load_teacher(tiny_model_dir)
    texts = [f"text {i}" for i in range(10)]
    first = teacher_embeddings(teacher, texts, "document", tmp_path / "cache", shard_size=4, verbose=0)
    np.testing.assert_allclose(first, teacher.encode_documents(texts), atol=1e-6)
    calls = []
    monkeypatch.setattr(type(teacher), "encode", lambda self, *args, **kwargs: calls.append(args))
    again = teacher_embeddings(teacher, texts, "document", tmp_path / "cache", shard_size=4, verbose=0)
    assert calls == [] and np.array_equal(again, first)  # the cache, read back
    texts[5] = "changed"
    with pytest.raises(MismatchError, match=r"shard 1 was encoded from other texts \(documents 4-7"):
        teacher_embeddings(teacher, texts, "document", tmp_path / "cache", shard_size=4, verbose=0)


def test_resume_with_another_teacher_is_refused(tiny_model_dir, tmp_path):
    from training_inputs import write_bert_text_embedder

    config = tiny_distillation(tmp_path, tiny_model_dir)
    distill(config)
    write_bert_text_embedder(tmp_path / "bert")
    with pytest.raises(MismatchError, match=r"this run reads the teacher model .*bert, the run being resumed read"):
        distill({**config, "teacher": str(tmp_path / "bert")})


def test_a_keras_hub_teacher_of_another_size_trains_the_projection(tmp_path, tiny_model_dir):
    from training_inputs import write_bert_text_embedder

    from gtr_keras.training.distillation import DistilledDualEncoder
    from gtr_keras.training.dual_encoder import make_optimizer

    write_bert_text_embedder(tmp_path / "bert")  # 8-d embeddings; the student's are 64-d
    config = tiny_distillation(tmp_path, str(tmp_path / "bert"), steps=2)
    student = distill(config)
    assert student.model.embedding_dim == 64
    weights = final_weights(tmp_path / "run")
    assert not any("teacher_projection" in name for name in weights)  # a training aid, not kept
    # The projection learns: one step moves it.
    data = DistillationTexts(config["data"]["texts"], query_length=8, document_length=16)
    queries, documents = data.distinct_texts()
    teacher = load_teacher(tmp_path / "bert")
    model = DistilledDualEncoder(student.model, teacher.embedding_dim, mse_weight=1.0)
    model.compile(optimizer=make_optimizer(steps=2, learning_rate=0.01))
    before = model.projection.kernel.numpy().copy()
    batches = data.dataset(student.model.preprocessor.tokenizer, teacher.encode_queries(queries),
                           teacher.encode_documents(documents), batch_size=8)
    model.fit(batches, steps_per_epoch=1, epochs=1, verbose=0)
    assert model.projection.kernel.shape == (64, 8) and np.abs(model.projection.kernel.numpy() - before).max() > 1e-4


DISTILL_SCRIPT = """
import json, sys, time
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from gtr_keras.training import callbacks, distillation
config = json.loads(sys.argv[1])
if len(sys.argv) > 2:
    pause_at = int(sys.argv[2])
    def pausing(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == pause_at:
            time.sleep(600)
    callbacks.Checkpoints.on_train_batch_end = pausing
distillation.distill(config)
"""


@pytest.mark.large
@pytest.mark.slow
def test_resume_after_sigkill_and_mirrored_runs_equal_an_uninterrupted_run(tiny_model_dir, tmp_path):
    base = tiny_distillation(tmp_path, tiny_model_dir, steps=8, seed=3)

    def run(name, *args, **settings):
        return run_python(DISTILL_SCRIPT, json.dumps({**base, "output_dir": str(tmp_path / name), **settings}), *args)

    assert run("straight").wait(timeout=300) == 0
    process = run("resumed", "3")
    checkpoint = tmp_path / "resumed" / "checkpoints" / "checkpoint"
    deadline = time.time() + 300
    while not checkpoint.exists():
        assert process.poll() is None and time.time() < deadline, "distillation ended before its first checkpoint"
        time.sleep(0.05)
    time.sleep(1.0)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "resumed" / "model").exists() and "ckpt-2" in checkpoint.read_text()
    assert run("resumed").wait(timeout=300) == 0
    # Two replicas with half the batch each: the score matrices are the global batch's, so the same weights.
    assert run("mirrored", strategy="mirrored").wait(timeout=300) == 0
    straight = final_weights(tmp_path / "straight")
    for name in ("resumed", "mirrored"):
        other = final_weights(tmp_path / name)
        assert other.keys() == straight.keys() and len(straight) > 5
        for key in straight:
            np.testing.assert_allclose(other[key], straight[key], atol=1e-5, rtol=0, err_msg=f"{name}: {key}")


def test_texts_files_pairs_single_texts_and_corpus_records(tmp_path):
    pairs = write_jsonl(tmp_path / "p.jsonl", [{"query": "q1", "positive": "d1", "_id": 1}, {"query": "q2",
                                                                                            "positive": "d2"}])
    with gzip.open(tmp_path / "c.jsonl.gz", "wt") as f:
        f.write(json.dumps({"_id": "x", "title": "Title", "text": "body"}) + "\n\n")
        f.write(json.dumps({"_id": "y", "text": "d1"}) + "\n")
    (tmp_path / "t.txt").write_text("one\n\n  \ntwo\n")
    data = DistillationTexts([pairs, str(tmp_path / "c.jsonl.gz"), str(tmp_path / "t.txt")])
    assert data.read() == [("q1", "d1"), ("q2", "d2"), (None, "Title body"), (None, "d1"), (None, "one"),
                           (None, "two")]
    assert data.distinct_texts() == (["q1", "q2"], ["d1", "d2", "Title body", "one", "two"])
    assert data.check() == 6


def test_a_batch_carries_the_teacher_rows_of_its_texts():
    data = DistillationTexts(["unused.txt"])
    data._examples = [("q0", "d0"), (None, "d1"), ("q1", "d0")]
    queries, documents = data.distinct_texts()
    teacher_queries = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    teacher_documents = np.array([[2.0, 0.0], [0.0, 2.0]], np.float32)
    tokenizer = GTRTokenizer(open(SPIECE, "rb").read())
    batch = next(iter(data.dataset(tokenizer, teacher_queries, teacher_documents, batch_size=3, repeat=False)))
    rows = {}
    for single, teacher_query, teacher_document in zip(
        batch["single"].numpy(), batch["teacher_query"].numpy(), batch["teacher_positive"].numpy(),
    ):
        rows[tuple(teacher_document)] = rows.get(tuple(teacher_document), []) + [(single, tuple(teacher_query))]
    assert sorted(rows[(2.0, 0.0)]) == [(False, (0.0, 1.0)), (False, (1.0, 0.0))]  # d0 with q0 and with q1
    assert rows[(0.0, 2.0)] == [(True, (0.0, 2.0))]  # a single text is its own anchor


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"query": "q", "positive": "d"}\n{"query": "q2"}\n', r"t\.jsonl:2: missing field `positive`"),
        ('{"query": "q", "positive": "d"}\n{bad\n', r"t\.jsonl:2: malformed JSON"),
        ('{"_id": "a", "title": "only a title"}\n', r"t\.jsonl:1: missing field `text`"),
        ('{"_id": "a", "text": 5}\n', r"t\.jsonl:1: field `text` must be a string"),
        ('{"text": "no id"}\n', r"t\.jsonl:1: missing field `_id`"),
        ("", r"t\.jsonl: no texts to distil on"),
    ],
)
def test_bad_texts_name_the_file_line_and_field(tmp_path, content, message):
    (tmp_path / "t.jsonl").write_text(content)
    with pytest.raises(DataError, match=message):
        DistillationTexts([str(tmp_path / "t.jsonl")]).check()


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"teacher": None}, r"missing setting `teacher` \(--teacher\)"),
        ({"init": None}, r"missing setting `init` \(--student\)"),
        ({"grad_cache_chunk_size": 2}, "grad_cache_chunk_size does not apply to distillation"),
        ({"mse_weight": -1.0}, "mse_weight must not be negative"),
        ({"mse_weight": float("inf")}, "mse_weight must be a finite number"),
        ({"sentencepiece_case_folding": True, "tokenizer": "spiece.model"},
         "sentencepiece_case_folding applies only to the SentencePiece model trained for a preset"),
        ({"sentencepiece_vocabulary_size": 500, "init": "models/student"},
         "sentencepiece_vocabulary_size applies only .* this run uses the tokenizer of models/student"),
        ({"teacher_temperature": 0}, "teacher_temperature must be positive"),
        ({"teacher_shard_size": 0}, "teacher_shard_size must be an integer of at least 1"),
        ({"data": {"texts": []}}, r"data\.texts must be a list of files"),
    ],
)
def test_bad_settings_are_refused(settings, message):
    values = {"init": "gtr-tiny", "teacher": "t", "output_dir": "o", "data": {"texts": ["a.txt"]}, **settings}
    with pytest.raises(UserError, match=message):
        DistillConfig.from_dict(values)


def test_the_loss_is_zero_for_the_teachers_own_embeddings_and_splits_over_rows():
    rng = np.random.default_rng(0)
    unit = lambda n, d: tf.math.l2_normalize(tf.constant(rng.normal(size=(n, d)), tf.float32), -1)  # noqa: E731
    anchors, documents, single = unit(6, 8), unit(6, 8), tf.constant([False, True, False, True, False, False])
    value, hits = SimilarityDistillationLoss(0.1, 0.1, mse_weight=0.5).loss_and_hits(
        anchors, documents, anchors, documents, single)
    assert float(value) == pytest.approx(0.0, abs=1e-6) and float(hits) == 6.0
    loss = SimilarityDistillationLoss(0.05, 0.1, mse_weight=0.5)
    student_anchors, student_documents = unit(6, 8), unit(6, 8)
    whole = float(loss(student_anchors, student_documents, anchors, documents, single))
    parts = sum(float(loss(student_anchors, student_documents, anchors, documents, single, rows=rows))
                for rows in ((0, 2), (2, 6)))
    assert whole == pytest.approx(parts, rel=1e-6) and whole > 0.1


def test_the_loss_is_the_kl_from_the_teacher_with_a_single_texts_own_score_left_out():
    rng = np.random.default_rng(1)
    s_a, s_d, t_a, t_d = (rng.normal(size=(4, 3)).astype("float32") for _ in range(4))
    single = np.array([False, True, False, True])
    tau_s, tau_t = 0.5, 0.2

    def softmax_rows(logits, masked):
        logits = np.where(masked, -np.inf, logits)
        e = np.exp(logits - logits.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    masked = np.eye(4, dtype=bool) & single[:, None]
    expected = 0.0
    for student, teacher in (((s_a, s_d), (t_a, t_d)), ((s_d, s_a), (t_d, t_a))):
        p = softmax_rows(teacher[0] @ teacher[1].T / tau_t, masked)
        q = softmax_rows(student[0] @ student[1].T / tau_s, masked)
        kept = ~masked
        expected += np.sum(p[kept] * (np.log(p[kept]) - np.log(q[kept])))  # KL(teacher || student)
    loss = SimilarityDistillationLoss(tau_s, tau_t)
    assert float(loss(s_a, s_d, t_a, t_d, tf.constant(single))) == pytest.approx(expected / 8, rel=1e-5)


@pytest.mark.large
@pytest.mark.slow
def test_the_cli_distils_and_bad_inputs_are_exit_2_and_one_line(tiny_model_dir, tmp_path):
    pairs = write_jsonl(tmp_path / "pairs.jsonl", word_pairs(16, 0))
    common = ["--student", "gtr-tiny", "--tokenizer", SPIECE, "--steps", "2", "--batch-size", "8",
              "--checkpoint-every", "2", "--query-length", "8", "--document-length", "16"]

    def run(*argv):
        return subprocess.run(["gtr-keras", "distill", *argv], capture_output=True, text=True, timeout=300)

    done = run("--teacher", tiny_model_dir, "--texts", pairs, "--output-dir", str(tmp_path / "out"), *common)
    assert done.returncode == 0, done.stderr
    assert "distilled model written to" in done.stdout and (tmp_path / "out" / "model" / "config.json").exists()

    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.jsonl").write_text('{"query": "q", "positive": "d"}\n{"query": 3, "positive": "d"}\n')
    cases = [
        (["--teacher", str(tmp_path / "nope"), "--texts", pairs], "nope: no such teacher model directory"),
        (["--teacher", str(tmp_path / "empty"), "--texts", pairs], "not a text embedder"),
        (["--teacher", tiny_model_dir, "--texts", str(tmp_path / "none.txt")], "argument --texts: "),
        (["--teacher", tiny_model_dir, "--texts", str(tmp_path / "bad.jsonl")],
         r"bad\.jsonl:2: field `query` must be a string"),
        (["--teacher", tiny_model_dir, "--texts", pairs, "--mse-weight", "-1"], "argument --mse-weight: must be at"),
        (["--teacher", tiny_model_dir, "--texts", pairs, "--student", "gtr-nano"], "gtr-nano: no such model"),
    ]
    for number, (argv, message) in enumerate(cases):
        argv = [*common, *argv, "--output-dir", str(tmp_path / f"bad{number}")]
        result = run(*argv)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and re.search(message, lines[0]), (argv, result.stderr)
        assert not (tmp_path / f"bad{number}" / "model").exists()


def test_bfloat16_validation_and_keep_best_work_as_in_train(tiny_model_dir, tmp_path, capsys):
    from beir_files import write_beir

    from gtr_keras.retrieval.readers import Corpus

    corpus = Corpus([f"d{i}" for i in range(8)], [""] * 8, [f"the {w} and the river" for w in WORDS[:8]])
    validation = write_beir(tmp_path / "dev", corpus, {"q1": "cat", "q2": "dog"}, [("q1", "d0", 1), ("q2", "d1", 1)],
                            split="dev")
    config = tiny_distillation(tmp_path, tiny_model_dir, precision="bfloat16", validation_data=str(validation),
                               keep_best=True, verbose=2)
    student = distill(config)
    assert np.isfinite(student.encode_documents(["cat"])).all()
    out = capsys.readouterr().out
    assert "validation at step 2: ndcg@10" in out and "validation at step 4: ndcg@10" in out
    assert json.loads((tmp_path / "run" / "best_model" / "validation.json").read_text())["precision"] == "bfloat16"
    assert json.loads((tmp_path / "run" / "train_config.json").read_text())["settings"]["precision"] == "bfloat16"


def test_validation_of_a_student_from_a_directory_uses_the_runs_token_budgets(tiny_model_dir, tmp_path):
    from beir_files import write_beir

    from gtr_keras.retrieval.evaluation import evaluate_run
    from gtr_keras.retrieval.readers import Corpus
    from gtr_keras.retrieval.runs import gtr_run, load_dataset

    # The student's directory keeps documents at 512 tokens; the run's are 16, which cut these documents.
    texts = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(30)) for i in range(12)]
    corpus = Corpus([f"d{i}" for i in range(12)], [""] * 12, texts)
    queries = {f"q{i}": " ".join(WORDS[(i + j) % len(WORDS)] for j in (20, 21, 22)) for i in range(12)}
    dev = write_beir(tmp_path / "dev", corpus, queries, [(f"q{i}", f"d{i}", 1) for i in range(12)], split="dev")
    config = tiny_distillation(tmp_path, tiny_model_dir, init=tiny_model_dir, tokenizer=None, model={}, steps=2,
                               validation_data=str(dev), keep_best=True)
    distill(config)
    best = json.loads((tmp_path / "run" / "best_model" / "validation.json").read_text())
    saved = load_teacher(str(tmp_path / "run" / "best_model"))
    assert saved._encoder.document_length == 16
    corpus, queries, qrels, _ = load_dataset(str(dev), "dev")
    assert evaluate_run(qrels, gtr_run(saved, corpus, queries))["ndcg@10"] == pytest.approx(best["ndcg@10"])
