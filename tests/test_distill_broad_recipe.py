"""recipes/distill_broad: the text extraction and the mix on small made-up package files and collections (no
Debian package, no `../shared`), and their exit 2 on bad input."""

import gzip
import json
import os
import subprocess
import sys

import pytest
from beir_files import write_beir

from gtr_keras.beir.readers import Corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = os.path.join(REPO, "recipes", "distill_broad")
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


@pytest.fixture
def extract_texts(monkeypatch):
    monkeypatch.syspath_prepend(RECIPE)
    import extract_texts

    return extract_texts


def _b64(value):
    digits = ""
    while True:
        digits = B64[value % 64] + digits
        value //= 64
        if not value:
            return digits


def _write_dictd(directory, name, entries):
    """A dictd database (`NAME.index`, `NAME.dict.dz`) holding `[(headword, text)]`."""
    data, index = b"", []
    for headword, text in entries:
        raw = text.encode("utf-8")
        index.append(f"{headword}\t{_b64(len(data))}\t{_b64(len(raw))}\n")
        data += raw
    with gzip.open(os.path.join(directory, f"{name}.dict.dz"), "wb") as f:
        f.write(data)
    with open(os.path.join(directory, f"{name}.index"), "w", encoding="utf-8") as f:
        f.writelines(index)


def _read(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_collector_cleans_drops_and_writes_the_same_bytes_twice(extract_texts, tmp_path):
    pairs = extract_texts.Collector("toy-pairs", True)
    pairs.add("a", "  a sauce made of\tapples stewed down  ", "Apple butter")
    pairs.add("b", "A SAUCE made of apples stewed down", "apple BUTTER")  # the same, case-folded
    pairs.add("c", "too short", "word")
    pairs.add("d", "See At one.", "atone")
    pairs.add("a", "a second sense of the same headword", "Apple butter")
    pairs.add("e", "word " * 600, "long")
    assert pairs.counts == {"read": 6, "unparsed": 0, "short": 1, "xref": 1, "duplicate": 1, "truncated": 1}
    first = pairs.write(str(tmp_path / "one"))
    with open(first, "rb") as f:
        header, written = f.read(10), f.read()
    assert header[3] == 0 and header[4:8] == b"\0\0\0\0"  # no name, mtime 0 in the gzip header
    records = _read(first)
    assert sorted(r["_id"] for r in records) == ["a", "a#2", "e"]
    assert {"_id": "a", "query": "Apple butter", "positive": "a sauce made of apples stewed down"} in records
    assert max(len(r["positive"]) for r in records) <= extract_texts.MAX_CHARS
    with open(pairs.write(str(tmp_path / "two")), "rb") as f:
        assert f.read()[10:] == written


def test_foldoc_and_jargon_entries_become_headword_definition_pairs(extract_texts, tmp_path, monkeypatch):
    monkeypatch.setattr(extract_texts, "DICTD_DIR", str(tmp_path))
    _write_dictd(
        tmp_path,
        "foldoc",
        [
            ("00-database-info", "FOLDOC header\n"),
            (
                "compiler",
                "compiler\n\n   <language> A program that translates {source code} into {object\n"
                "   code} (see {(http://example.com/)}).\n\n   (1996-01-01)\n\n",
            ),
        ],
    )
    _write_dictd(
        tmp_path,
        "jargon",
        [
            (
                "kluge",
                "kluge\n /klooj/, n.\n\n   1. [techspeak] A clever programming trick intended to solve a problem.\n\n",
            )
        ],
    )
    foldoc, jargon = extract_texts.Collector("foldoc-pairs", True), extract_texts.Collector("jargon-pairs", True)
    extract_texts.foldoc(foldoc)
    extract_texts.jargon(jargon)
    assert [(r["query"], r["positive"]) for r in foldoc.records.values()] == [
        ("compiler", "A program that translates source code into object code (see ).")
    ]
    assert [(r["query"], r["positive"]) for r in jargon.records.values()] == [
        ("kluge", "A clever programming trick intended to solve a problem.")
    ]


def test_a_manual_page_gives_its_name_and_description_without_code(extract_texts):
    sections = extract_texts.man_sections(
        ".TH TOY 7\n.SH NAME\ntoy \\- a page for tests\n.SH DESCRIPTION\nThe\n.B toy\nprogram reads\n"
        ".IR file s.\n.EX\nint main(void);\n.EE\n.PP\nSecond \\(em paragraph.\n.SH SEE ALSO\nnothing\n"
    )
    assert " ".join(sections["NAME"]) == "toy - a page for tests"
    description = " ".join(sections["DESCRIPTION"])
    assert "The toy program reads files." in description and "Second — paragraph." in description
    assert "int main" not in description and "nothing" not in description


def test_extraction_without_the_packages_is_exit_2_naming_them(extract_texts, tmp_path, monkeypatch, capsys):
    from gtr_keras.errors import run_script

    monkeypatch.setattr(extract_texts, "WORDNET_DIR", str(tmp_path / "wordnet"))
    monkeypatch.setattr(sys, "argv", ["extract_texts.py", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as exit_:
        run_script(extract_texts.main)
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "extract_texts.py: error: missing " + str(tmp_path / "wordnet") in error
    assert "apt-get install -y wordnet-base" in error


def _toy_inputs(tmp_path):
    """Broad files, Debian pairs, MS MARCO passages and the four evaluation collections; one broad pair and one
    MS MARCO passage equal an evaluation text."""
    broad, data = tmp_path / "broad", tmp_path / "data"
    broad.mkdir()

    def jsonl_gz(path, records):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)

    for name in ("wordnet", "gcide", "foldoc", "jargon", "manpages"):
        jsonl_gz(
            broad / f"{name}-pairs.jsonl.gz",
            [
                {"_id": f"{name}:{i}", "query": f"{name} word {i}", "positive": f"the {name} meaning number {i}"}
                for i in range(3)
            ],
        )
    jsonl_gz(
        broad / "foldoc-pairs.jsonl.gz",
        [
            {"_id": "foldoc:0", "query": "lift", "positive": "The Lift of a WING at high speed"},  # a Cranfield title
            {"_id": "foldoc:1", "query": "drag", "positive": "a force against motion through a fluid"},
        ],
    )
    jsonl_gz(broad / "wordnet-examples.jsonl.gz", [{"_id": "wordnet:e1", "text": "an example sentence here"}])
    (data / "debian-descriptions").mkdir(parents=True)
    jsonl_gz(
        data / "debian-descriptions" / "pairs.jsonl.gz",
        [{"_id": i, "query": f"tool {i}", "positive": f"a tool that does thing {i}"} for i in range(4)],
    )
    write_beir(
        data / "msmarco-dl19-subset",
        Corpus(["p1", "p2"], ["", ""], ["a web passage", "what is a query"]),
        {"m1": "web"},
        [("m1", "p1", 1)],
    )
    for name in ("scifact", "nfcorpus", "cranfield", "cisi"):
        corpus = Corpus(
            [f"{name}1"], ["The lift of a wing at high speed" if name == "cranfield" else ""], [f"a {name} document"]
        )
        write_beir(data / name, corpus, {"q1": "What is a query"}, [("q1", f"{name}1", 1)])
    return broad, data


def _mix(broad, data, out):
    return subprocess.run(
        [sys.executable, os.path.join(RECIPE, "mix_texts.py"), str(broad), str(data), str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.large
def test_the_mix_drops_evaluation_texts_and_gives_the_same_bytes_twice(tmp_path):
    broad, data = _toy_inputs(tmp_path)
    done = _mix(broad, data, tmp_path / "one")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "foldoc-pairs: 1 of 2 kept" in done.stdout and "msmarco-passages: 1 of 2 kept" in done.stdout
    pairs, singles = _read(tmp_path / "one" / "pairs.jsonl.gz"), _read(tmp_path / "one" / "singles.jsonl.gz")
    assert len(pairs) == 4 * 3 + 1 + 4 and "foldoc:0" not in {r["_id"] for r in pairs}
    assert {r["_id"] for r in singles} == {"wordnet:e1", "msmarco:p1"}
    assert {"_id": "debian:2", "query": "tool 2", "positive": "a tool that does thing 2"} in pairs
    assert _mix(broad, data, tmp_path / "two").returncode == 0
    for name in ("pairs.jsonl.gz", "singles.jsonl.gz"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


@pytest.mark.large
def test_the_mix_names_the_file_line_and_field_of_a_bad_record(tmp_path):
    broad, data = _toy_inputs(tmp_path)
    with gzip.open(broad / "jargon-pairs.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps({"_id": "j0", "query": "kluge", "positive": "a clever trick"}) + "\n")
        f.write(json.dumps({"_id": "j1", "query": "hack"}) + "\n")
    done = _mix(broad, data, tmp_path / "out")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"{broad / 'jargon-pairs.jsonl.gz'}:2: missing field `positive`" in done.stderr
    assert not (tmp_path / "out" / "pairs.jsonl.gz").exists()
    (data / "cisi" / "corpus.jsonl").unlink()
    assert "cisi: directory has none of corpus.jsonl" in _mix(broad, data, tmp_path / "out").stderr


def test_the_teacher_check_names_a_file_that_does_not_match(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(os.path.join(REPO, "recipes", "distill_cpu"))
    import fetch_teacher

    from gtr_keras.errors import UserError

    (tmp_path / "config.json").write_text("{}")
    fetch_teacher.check_sha256(
        tmp_path / "config.json", "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    )
    with pytest.raises(UserError, match=r"config.json: the file has SHA-256 44136fa3.*, expected 953f9c0d"):
        fetch_teacher.check_sha256(tmp_path / "config.json", fetch_teacher.EXPECTED["config.json"])
    monkeypatch.setattr(sys, "argv", ["fetch_teacher.py", str(tmp_path)])
    assert fetch_teacher.main() is None  # a teacher directory that exists is kept, nothing downloaded
