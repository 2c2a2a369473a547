"""`--passages TOKENS[:STRIDE]` of `index`, `update` and `search`: documents cut into token windows, searched as
documents, each hit with the window that scored (the acceptance of issue 61's passages, on the bundled model)."""

import json

import pytest

from gtr_keras.cli.main import main
from gtr_keras.models.gtr.presets import BUNDLED_MODEL_DIR

FILLER = (
    "The wing of an aircraft produces lift as air flows faster over its curved upper surface than below it. "
    "Flaps and slats change the camber of the wing for take-off and landing, and ailerons roll the aircraft. "
)
PENGUINS = "Emperor penguins breed in large colonies on the Antarctic sea ice during the dark polar winter."
DOCUMENTS = {
    "long": ("Wing aerodynamics", FILLER * 6 + PENGUINS),
    "gulls": ("Seabirds", "Gulls nest on coastal cliffs and feed on fish along the shore."),
    "engine": ("Jet engines", "A turbofan engine moves a large mass of air with its fan to produce thrust."),
    "tail": ("", "The tail of an aircraft keeps it stable: the fin against yaw, the tailplane against pitch."),
    "rotor": ("Helicopters", "A helicopter's rotor blades are rotating wings that lift it vertically."),
}
QUERY = "Where do emperor penguins breed?"


def _corpus(path, documents=DOCUMENTS):
    with open(path, "w") as f:
        for doc_id, (title, text) in documents.items():
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text, "metadata": {"len": len(text)}}) + "\n")
    return str(path)


def _index(corpus, out, *flags):
    return ["index", "--model", "gtr_small_distilled_en", "--corpus", corpus, "--out", str(out), *flags]


def _hits(capsys, index, *flags, k=4, query=QUERY):
    capsys.readouterr()
    assert (
        main(
            [
                "search",
                query,
                "--index",
                str(index),
                "--model",
                "gtr_small_distilled_en",
                "-k",
                str(k),
                "--json",
                *flags,
            ]
        )
        == 0
    )
    return json.loads(capsys.readouterr().out)[0]["hits"]


@pytest.mark.large
@pytest.mark.slow
def test_a_passages_index_finds_what_lies_past_the_first_window_and_says_where(tmp_path, capsys):
    from gtr_keras.saving import load_model

    corpus = _corpus(tmp_path / "corpus.jsonl")
    assert main(_index(corpus, tmp_path / "whole")) == 0
    assert main(_index(corpus, tmp_path / "passages", "--passages", "64:32")) == 0
    assert _hits(capsys, tmp_path / "whole")[0]["id"] != "long"  # past the model's 128 tokens: never read
    hits = _hits(capsys, tmp_path / "passages")
    assert len(hits) == 4 and len({hit["id"] for hit in hits}) == 4 and hits[0]["id"] == "long"
    encoder = load_model(BUNDLED_MODEL_DIR)
    query = encoder.encode_queries([QUERY])[0]
    for hit in hits:
        title, text = DOCUMENTS[hit["id"]]
        start, end = hit["passage"]["start"], hit["passage"]["end"]
        assert hit["text"] == text
        window = encoder.encode_documents([f"{title} {text[start:end]}".strip()])[0]
        assert abs(float(window @ query) - hit["score"]) < 1e-5  # text[start:end] is the window that scored
    assert "penguins" in DOCUMENTS["long"][1][hits[0]["passage"]["start"] : hits[0]["passage"]["end"]]
    assert hits[0]["passage"]["start"] > len(FILLER)
    filtered = _hits(capsys, tmp_path / "passages", "--filter", "len < 100", k=10)
    assert {hit["id"] for hit in filtered} == {"gulls", "engine", "tail", "rotor"}  # a document's metadata, whole
    assert main(["search", QUERY, "--index", str(tmp_path / "passages"), "--model", "gtr_small_distilled_en"]) == 0
    assert "Emperor penguins breed" in capsys.readouterr().out  # the window that scored, as the snippet


@pytest.mark.large
def test_update_and_delete_go_to_all_of_a_documents_windows(tmp_path, capsys):
    out = str(tmp_path / "passages")
    corpus = _corpus(tmp_path / "corpus.jsonl")
    assert main(_index(corpus, out, "--passages", "64")) == 0
    new = _corpus(tmp_path / "new.jsonl", {"long": ("Wing aerodynamics", FILLER)})
    (tmp_path / "gone.txt").write_text("gulls\n")
    update = [
        "update",
        out,
        "--model",
        "gtr_small_distilled_en",
        "--corpus",
        new,
        "--delete",
        str(tmp_path / "gone.txt"),
    ]
    assert main(update) == 0
    assert "4 documents" in capsys.readouterr().out
    hits = _hits(capsys, out, k=10)
    assert sorted(hit["id"] for hit in hits) == ["engine", "long", "rotor", "tail"]
    assert next(hit for hit in hits if hit["id"] == "long")["text"] == FILLER


@pytest.mark.large
def test_an_update_or_search_with_another_passages_setting_is_refused_naming_it(tmp_path, capsys):
    out = str(tmp_path / "passages")
    corpus = _corpus(tmp_path / "corpus.jsonl")
    assert main(_index(corpus, out, "--passages", "64:32")) == 0
    capsys.readouterr()
    assert main(["update", out, "--delete", str(tmp_path / "corpus.jsonl"), "--passages", "32"]) == 2
    assert "built with --passages 64:32, but --passages 32:32 is given" in capsys.readouterr().err
    assert main(["search", QUERY, "--index", out, "--model", "gtr_small_distilled_en", "--passages", "64"]) == 2
    assert "built with --passages 64:32, but --passages 64:64 is given" in capsys.readouterr().err
    assert main(_index(corpus, tmp_path / "x", "--passages", "128")) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "above the model's document budget (128 tokens" in error
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "value, message",
    [
        ("4", "TOKENS must be at least 8, got 4"),
        ("64:65", "STRIDE must be from 1 to TOKENS (64), got 65"),
        ("64:x", "TOKENS[:STRIDE]"),
    ],
)
def test_a_bad_passages_flag_is_exit_2_and_one_line_before_any_work(tmp_path, capsys, value, message):
    corpus = _corpus(tmp_path / "corpus.jsonl")
    with pytest.raises(SystemExit) as exit_:
        main(_index(corpus, tmp_path / "i", "--passages", value))
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and len(error.strip().splitlines()) == 1
    assert f"argument --passages: {message}" in error and not (tmp_path / "i").exists()


def test_passages_go_with_a_corpus_not_embeddings(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["index", "--embeddings", "emb/*.npy", "--out", str(tmp_path / "i"), "--passages", "64"])
    assert exit_.value.code == 2 and "argument --passages: cuts the documents of --corpus" in capsys.readouterr().err


WRIGHT = (
    "The Wright brothers built gliders and a wind tunnel to study lift, and designed their own light engine and "
    "propellers. Wilbur and Orville warped the wings to roll the aircraft. "
) * 6 + "The Wright Flyer first flew at Kitty Hawk, North Carolina, on 17 December 1903."
FIRST_FLIGHT = "Where did the Wright Flyer first fly?"


@pytest.mark.large
@pytest.mark.slow
def test_a_late_chunking_index_finds_a_fact_past_the_first_window_and_updates_late_chunked(tmp_path, capsys):
    from gtr_keras.models.late_chunking import LateChunks
    from gtr_keras.saving import load_model

    documents = {**DOCUMENTS, "long": ("The Wright brothers", WRIGHT)}
    out, corpus = tmp_path / "late", _corpus(tmp_path / "corpus.jsonl", documents)
    assert main(_index(corpus, out, "--passages", "64:32", "--late-chunking")) == 0
    with open(out / "retriever.json") as f:
        assert json.load(f)["late_chunking"] == 2048
    hits = _hits(capsys, out, query=FIRST_FLIGHT)
    assert len({hit["id"] for hit in hits}) == 4 and hits[0]["id"] == "long"
    start, end = hits[0]["passage"]["start"], hits[0]["passage"]["end"]
    assert "Kitty Hawk" in WRIGHT[start:end] and start > 0  # a window past the first
    encoder = load_model(BUNDLED_MODEL_DIR)
    late, query = LateChunks(encoder, 2048), encoder.encode_queries([FIRST_FLIGHT])[0]
    for hit in hits:
        title, text = documents[hit["id"]]
        window = late.encode([title], [text], [[(hit["passage"]["start"], hit["passage"]["end"])]])[0]
        assert abs(float(window @ query) - hit["score"]) < 1e-5  # the window's late vector scored
    plain = encoder.encode_documents([f"The Wright brothers {WRIGHT[start:end]}"])[0]
    assert abs(float(plain @ query) - hits[0]["score"]) > 1e-3  # not the window encoded alone
    title, text = "Gliders", WRIGHT.replace("Kitty Hawk", "Kill Devil Hills")
    assert (
        main(
            [
                "update",
                str(out),
                "--model",
                "gtr_small_distilled_en",
                "--corpus",
                _corpus(tmp_path / "new.jsonl", {"gulls": (title, text)}),
            ]
        )
        == 0
    )
    gulls = next(hit for hit in _hits(capsys, out, k=5, query=FIRST_FLIGHT) if hit["id"] == "gulls")
    window = late.encode([title], [text], [[(gulls["passage"]["start"], gulls["passage"]["end"])]])[0]
    assert abs(float(window @ query) - gulls["score"]) < 1e-5  # the update late-chunked it


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--late-chunking"], "argument --late-chunking: pools the windows of --passages"),
        (["--passages", "64", "--document-length", "512"], "argument --document-length: the tokens of a forward"),
        (["--passages", "64", "--late-chunking", "--document-length", "1"], "argument --document-length:"),
    ],
)
def test_a_bad_late_chunking_flag_is_exit_2_and_one_line_before_any_work(tmp_path, capsys, flags, message):
    corpus = _corpus(tmp_path / "corpus.jsonl")
    with pytest.raises(SystemExit) as exit_:
        main(_index(corpus, tmp_path / "i", *flags))
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and len(error.strip().splitlines()) == 1
    assert message in error and not (tmp_path / "i").exists()


def test_late_chunking_goes_with_a_corpus_not_embeddings(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["index", "--embeddings", "emb/*.npy", "--out", str(tmp_path / "i"), "--late-chunking"])
    assert (
        exit_.value.code == 2 and "argument --late-chunking: pools the windows of --passages" in capsys.readouterr().err
    )


def test_late_chunking_is_refused_with_a_beam_runner(tmp_path, capsys):
    corpus = _corpus(tmp_path / "corpus.jsonl")
    with pytest.raises(SystemExit) as exit_:
        main(_index(corpus, tmp_path / "i", "--passages", "64", "--late-chunking", "--runner", "DirectRunner"))
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and len(error.strip().splitlines()) == 1
    assert "argument --late-chunking: not with --runner" in error and not (tmp_path / "i").exists()


@pytest.mark.large
def test_a_forward_pass_shorter_than_the_models_budget_is_exit_2_before_any_write(tmp_path, capsys):
    corpus = _corpus(tmp_path / "corpus.jsonl")
    assert main(_index(corpus, tmp_path / "i", "--passages", "64", "--late-chunking", "--document-length", "64")) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "late chunking reads at least the model's 128 tokens" in error
    assert not (tmp_path / "i").exists() and not (tmp_path / "i.partial").exists()
