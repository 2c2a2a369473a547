import gzip
import json
import re

import pytest
from conftest import write_jsonl

from gtr_keras.beir.qrels_checks import check_qrels
from gtr_keras.beir.readers import Corpus, check_corpus, load_corpus, load_qrels, load_queries
from gtr_keras.beir.text_inputs import read_texts
from gtr_keras.errors import DataError, DataWarning, UserError


def located(path, pattern):
    """A regex matching an error message that starts with `path`."""
    return re.escape(str(path)) + pattern


@pytest.fixture
def beir_dir(tmp_path):
    write_jsonl(
        tmp_path / "corpus.jsonl.gz",
        [
            {"_id": "d1", "title": "Cats", "text": "Cats purr."},
            {"_id": 2, "text": "No title here."},
            {"_id": "d3", "title": "", "text": ""},
        ],
    )
    write_jsonl(
        tmp_path / "queries.jsonl",
        [{"_id": "q1", "text": "why do cats purr"}, {"_id": "q2", "text": "titles"}],
    )
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\t2\t0\nq2\t2\t1\n")
    return tmp_path


def test_load_corpus_from_directory(beir_dir):
    corpus = load_corpus(beir_dir)
    assert corpus.ids == ["d1", "2", "d3"]
    assert corpus.titles == ["Cats", "", ""]
    assert corpus.texts == ["Cats purr.", "No title here.", ""]
    assert len(corpus) == 3
    assert corpus.joined() == ["Cats Cats purr.", "No title here.", ""]


def test_load_corpus_missing_text_names_file_line_and_field(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "a", "text": "x"}, {"_id": "b", "title": "t"}])
    with pytest.raises(DataError, match=located(path, r":2: missing field `text`")):
        load_corpus(path)


@pytest.mark.parametrize(
    "record, message",
    [
        ({"text": "x"}, r":1: missing field `_id`"),
        ({"_id": 1.5, "text": "x"}, r":1: field `_id` must be a string or an integer"),
        ({"_id": "a", "text": 3}, r":1: field `text` must be a string, got int"),
        ({"_id": "a", "title": ["t"], "text": "x"}, r":1: field `title` must be a string"),
    ],
)
def test_load_corpus_field_errors(tmp_path, record, message):
    path = write_jsonl(tmp_path / "corpus.jsonl", [record])
    with pytest.raises(DataError, match=located(path, message)):
        load_corpus(path)


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"_id": "", "text": "x"}', r":2: `_id` '' is empty"),
        ('{"_id": "a\\u0000b", "text": "x"}', r":2: `_id` 'a\\x00b' holds a NUL character"),
        ('{"_id": "d\\ud800", "text": "x"}', r":2: `_id` 'd\\ud800' holds a lone surrogate \(U\+D800 at character 1\)"),
        ('{"_id": "d", "text": "x \\udcff"}', r":2: field `text`: a lone surrogate \(U\+DCFF at character 2\)"),
        ('{"_id": "d", "title": "\\udfff", "text": "x"}', r":2: field `title`: a lone surrogate"),
        (
            '{"_id": "d", "text": "x", "metadata": {"lang": "\\ud800"}}',
            r":2: document 'd' field `metadata.lang`: a lone",
        ),
    ],
)
def test_load_corpus_refuses_an_empty_id_a_nul_and_a_lone_surrogate_naming_the_line(tmp_path, line, message):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "ok", "text": "x"}\n' + line + "\n")  # JSON's escapes write them
    with pytest.raises(DataError, match=located(path, message)):
        load_corpus(path)


def test_a_corpus_given_in_python_is_checked_as_a_corpus_file_is():
    checked = check_corpus(Corpus([7, "d8"], [None, "A title"], ["Lift.", "Drag."], [{"year": 2019, "x": None}, {}]))
    assert checked == Corpus(["7", "d8"], ["", "A title"], ["Lift.", "Drag."], [{"year": 2019}, {}])
    assert check_corpus(Corpus(["d1"], [""], ["x"], [{}])).metadata is None
    for corpus, message in [
        (Corpus(["d1", "d 2"], ["", ""], ["x", "y"]), "Corpus row 1: `_id` 'd 2' holds whitespace"),
        (Corpus(["d1"], [""], [None]), "Corpus row 0: missing field `text`"),
        (
            Corpus(["d1", "d2"], ["", ""], ["x", "y"], [{"year": 1}, {"year": "1"}]),
            "Corpus row 1: document 'd2' "
            "field `metadata.year` is a string, but document 'd1' (row 0) has a number: a field holds one type",
        ),
        (Corpus(["d1"], [""], ["x"], [{1: "x"}]), "Corpus row 0: document 'd1': a `metadata` field name must be a "),
        (Corpus(["d1", "d1"], ["", ""], ["x", "y"]), "Corpus: 1 duplicate `_id` value(s), e.g. 'd1' (rows 0 and 1)"),
    ]:
        with pytest.raises(DataError, match=f"^{re.escape(message)}"):
            check_corpus(corpus)


def test_load_corpus_duplicate_ids_lists_examples_and_lines(tmp_path):
    records = [{"_id": str(i % 8), "text": "x"} for i in range(16)]
    path = write_jsonl(tmp_path / "corpus.jsonl", records)
    with pytest.raises(DataError) as error:
        load_corpus(path)
    message = str(error.value)
    assert message.startswith(f"{path}: 8 duplicate `_id`")
    assert "'0' (lines 1 and 9)" in message and "'4' (lines 5 and 13)" in message
    assert "'5'" not in message


def test_load_corpus_missing_directory_file(tmp_path):
    with pytest.raises(DataError, match=located(tmp_path, r": directory has none of corpus.jsonl, corpus.jsonl.gz")):
        load_corpus(tmp_path)


def test_load_queries(beir_dir):
    assert load_queries(beir_dir) == {"q1": "why do cats purr", "q2": "titles"}


def test_load_queries_duplicate_ids(tmp_path):
    path = write_jsonl(tmp_path / "queries.jsonl", [{"_id": "q", "text": "a"}, {"_id": "q", "text": "b"}])
    with pytest.raises(DataError, match=r"'q' \(lines 1 and 2\)"):
        load_queries(path)


def test_load_qrels_from_directory(beir_dir):
    assert load_qrels(beir_dir) == {"q1": {"d1": 2, "2": 0}, "q2": {"2": 1}}


def test_load_qrels_without_header(tmp_path):
    path = tmp_path / "qrels.tsv"
    path.write_text("q1\td1\t1\r\n\nq2\td2\t-1\n")
    assert load_qrels(path) == {"q1": {"d1": 1}, "q2": {"d2": -1}}


@pytest.mark.parametrize(
    "row, message",
    [
        ("q2\td2", r":3: expected 3 tab-separated columns .* got 2"),
        ("q2\td2\tyes", r":3: field `score` must be an integer, got 'yes'"),
        ("q1\td1\t0", r":3: query 'q1' and document 'd1' already judged on line 2"),
    ],
)
def test_load_qrels_bad_line(tmp_path, row, message):
    path = tmp_path / "test.tsv"
    path.write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t1\n{row}\n")
    with pytest.raises(DataError, match=located(path, message)):
        load_qrels(path)


def test_read_texts_txt(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"\xef\xbb\xbffirst\r\n\nthird line\n")
    assert read_texts(path) == (["1", "2", "3"], ["first", "", "third line"])


def test_read_texts_txt_without_final_newline(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"a\nb")
    assert read_texts(path) == (["1", "2"], ["a", "b"])


def test_read_texts_empty_txt(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"")
    assert read_texts(path) == ([], [])


def test_read_texts_txt_invalid_utf8_and_nul_warn_and_keep_text(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"ok\nbad \xff byte\nnul\x00here\n")
    with pytest.warns(DataWarning) as record:
        ids, texts = read_texts(path)
    assert ids == ["1", "2", "3"]
    assert texts == ["ok", "bad \ufffd byte", "nul\x00here"]
    messages = [str(w.message) for w in record]
    assert len(messages) == 2
    assert messages[0].startswith(f"{path}:2: invalid UTF-8")
    assert messages[1].startswith(f"{path}:3: line contains NUL")


def test_read_texts_beir_files(beir_dir):
    assert read_texts(beir_dir / "corpus.jsonl.gz") == (
        ["d1", "2", "d3"],
        ["Cats Cats purr.", "No title here.", ""],
    )
    assert read_texts(beir_dir / "queries.jsonl") == (
        ["q1", "q2"],
        ["why do cats purr", "titles"],
    )


def test_read_texts_generic_jsonl_with_and_without_title(tmp_path):
    titled = write_jsonl(tmp_path / "docs.jsonl", [{"_id": "a", "title": "T", "text": "body"}])
    plain = write_jsonl(tmp_path / "plain.jsonl.gz", [{"_id": "a", "text": " body "}])
    assert read_texts(titled) == (["a"], ["T body"])
    assert read_texts(plain) == (["a"], [" body "])


def test_read_texts_rejects_unknown_extension(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("a,b\n")
    with pytest.raises(DataError, match=located(path, r": unsupported input")):
        read_texts(path)


def test_check_qrels_filters_and_reports():
    qrels = {
        "q1": {"d1": 1, "dx": 1},
        "q2": {"dy": 1},
        "qz": {"d1": 1},
    }
    filtered, report = check_qrels(qrels, ["d1", "d2"], ["q1", "q2"])
    assert filtered == {"q1": {"d1": 1}}
    assert report.unknown_query_ids == ["qz"]
    assert report.unknown_doc_ids == ["dx", "dy"]
    assert report.num_dropped_judgements == 3
    assert not report.ok
    assert str(report) == (
        "qrels: 1 query id(s) not in the queries (e.g. 'qz'); "
        "2 document id(s) not in the corpus (e.g. 'dx', 'dy'); "
        "dropped 3 of 4 judgements"
    )


def test_check_qrels_keeps_unknown_documents_for_evaluation():
    qrels = {
        "q1": {"d1": 1, "dx": 1},
        "q2": {"dy": 1},
        "qz": {"d1": 1},
    }
    checked, report = check_qrels(qrels, ["d1", "d2"], ["q1", "q2"], unknown_documents="keep")
    assert checked == {"q1": {"d1": 1, "dx": 1}, "q2": {"dy": 1}}
    assert report.unknown_query_ids == ["qz"]
    assert report.unknown_doc_ids == ["dx", "dy"]
    assert (report.num_dropped_judgements, report.num_kept_unknown_doc_judgements) == (1, 2)
    assert not report.ok
    assert str(report) == (
        "qrels: 1 query id(s) not in the queries (e.g. 'qz'); "
        "2 document id(s) not in the corpus (e.g. 'dx', 'dy'); "
        "dropped 1 of 4 judgements; "
        "kept 2 judgement(s) of absent documents as relevant, counted as misses (BEIR's rule)"
    )


def test_check_qrels_rejects_unknown_policy():
    with pytest.raises(UserError, match="unknown_documents"):
        check_qrels({"q": {"d": 1}}, ["d"], ["q"], unknown_documents="ignore")


def test_check_qrels_all_known():
    filtered, report = check_qrels({"q": {"d": 1}}, ["d"], ["q"])
    assert filtered == {"q": {"d": 1}}
    assert report.ok
    assert str(report) == "qrels: all 1 queries and 1 judgements match the collection"


def test_corpus_joined_strips():
    assert Corpus(["a"], [""], [" x "]).joined() == ["x"]


def test_iter_lines_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "qrels.tsv"
    path.write_bytes(b"q1\td1\t1\nq\xff\td2\t1\n")
    with pytest.raises(DataError, match=located(path, r":2: invalid UTF-8")):
        load_qrels(path)


@pytest.mark.parametrize("name", ["corpus.jsonl", "corpus.jsonl.gz"])
def test_jsonl_invalid_utf8_is_replaced_with_a_warning_like_txt(tmp_path, name):
    lines = b'{"_id": "d1", "text": "ok"}\n{"_id": "d2", "text": "bad \xff byte"}\n'
    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(lines)
    else:
        path.write_bytes(lines)
    with pytest.warns(DataWarning) as record:
        corpus = load_corpus(path)
    assert corpus.texts == ["ok", "bad \ufffd byte"]
    assert [str(w.message) for w in record] == [
        f"{path}:2: invalid UTF-8 (invalid start byte at byte 27); undecodable bytes replaced with U+FFFD"
    ]
    with pytest.warns(DataWarning, match=located(path, r":2: invalid UTF-8")):
        assert read_texts(path) == (["d1", "d2"], ["ok", "bad \ufffd byte"])


def test_queries_jsonl_invalid_utf8_and_bom(tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"_id": "q1", "text": "caf\xe9"}\n')
    with pytest.warns(DataWarning, match=located(path, r":1: invalid UTF-8")):
        assert load_queries(path) == {"q1": "caf\ufffd"}


def test_jsonl_byte_order_mark_is_dropped(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"_id": "d1", "text": "x"}\n')
    assert load_corpus(path).ids == ["d1"]


def test_qrels_byte_order_mark_is_dropped(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_bytes(b"\xef\xbb\xbfquery-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert load_qrels(path) == {"q1": {"d1": 1}}


def write_truncated_gzip(path, num_lines):
    with gzip.open(path, "wb") as f:
        for i in range(num_lines):
            f.write(json.dumps({"_id": str(i), "text": f"document {i} " * 4}).encode() + b"\n")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_truncated_gzip_names_file_and_last_line(tmp_path):
    path = tmp_path / "corpus.jsonl.gz"
    write_truncated_gzip(path, 20000)
    with pytest.raises(DataError, match=located(path, r": truncated gzip data after line \d+$")):
        load_corpus(path)


def test_truncated_gzip_header(tmp_path):
    path = tmp_path / "corpus.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"_id": "d", "text": "x"}\n')[:5])
    with pytest.raises(DataError, match=located(path, r": truncated gzip data$")):
        load_corpus(path)


def test_file_named_gz_that_is_not_gzip(tmp_path):
    path = write_jsonl(tmp_path / "docs.jsonl", [{"_id": "d", "text": "x"}]).rename(tmp_path / "docs.jsonl.gz")
    with pytest.raises(DataError, match=located(path, r": not a gzip file$")):
        read_texts(path)


def test_corrupt_gzip(tmp_path):
    path = tmp_path / "queries.jsonl.gz"
    data = bytearray(gzip.compress(b'{"_id": "q", "text": "x"}\n'))
    data[-8] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=located(path, r": corrupt gzip data after line 1 \(CRC check failed")):
        load_queries(path)


@pytest.mark.parametrize("loader", [load_corpus, load_queries, load_qrels, read_texts])
def test_missing_file(tmp_path, loader):
    path = tmp_path / "nowhere" / "corpus.jsonl"
    with pytest.raises(DataError, match=located(path, r": no such file")):
        loader(path)


def test_missing_queries_file_in_collection(beir_dir):
    (beir_dir / "queries.jsonl").unlink()
    with pytest.raises(DataError, match=located(beir_dir, r": directory has none of queries.jsonl, queries.jsonl.gz$")):
        load_queries(beir_dir)


def test_missing_qrels_split_lists_the_splits_there(beir_dir):
    (beir_dir / "qrels" / "train.tsv").write_text("q1\td1\t1\n")
    path = beir_dir / "qrels" / "dev.tsv"
    with pytest.raises(DataError, match=located(path, r": no such file \(splits there: test, train\)$")):
        load_qrels(beir_dir, "dev")


def test_missing_qrels_directory(tmp_path):
    path = tmp_path / "qrels" / "test.tsv"
    with pytest.raises(DataError, match=located(path, r": no such file \(no qrels directory\)$")):
        load_qrels(tmp_path)


@pytest.mark.parametrize(
    "relative, loader, argument",
    [
        ("corpus.jsonl", load_corpus, "."),
        ("qrels/test.tsv", load_qrels, "."),
        ("in.txt", read_texts, "in.txt"),
    ],
)
def test_directory_where_a_file_is_expected(tmp_path, relative, loader, argument):
    (tmp_path / relative).mkdir(parents=True)
    with pytest.raises(DataError, match=located(tmp_path / relative, r": is a directory, expected a file$")):
        loader(tmp_path / argument)


class _RefusingGFile:
    """A `tf.io.gfile.GFile` whose reads fail as TensorFlow's do on an unreadable file (or a 403 on gs://)."""

    def __init__(self, name, mode="r"):
        self.name = name

    def read(self, n=-1):
        import tensorflow as tf

        raise tf.errors.PermissionDeniedError(None, None, f"{self.name}; Permission denied")

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _on_ram(path):
    """A copy of local file `path` on ram://, which TensorFlow's file systems read (local files are read
    without TensorFlow)."""
    import tensorflow as tf

    copy = f"ram://readers-{path.parent.name}/{path.name}"
    tf.io.gfile.makedirs(copy.rpartition("/")[0])
    tf.io.gfile.copy(str(path), copy, overwrite=True)
    return copy


def test_a_local_file_that_cannot_be_read_is_named(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "d1", "text": "x"}])

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("gtr_keras.utils.files.paths.builtins.open", refuse)
    with pytest.raises(DataError, match=located(path, r": permission denied$")):
        load_corpus(tmp_path)


@pytest.mark.parametrize("name", ["corpus.jsonl.gz", "corpus.jsonl"])
def test_unreadable_file(tmp_path, monkeypatch, name):
    import tensorflow as tf

    path = _on_ram(write_jsonl(tmp_path / name, [{"_id": "d1", "text": "x"}]))  # read through TensorFlow
    monkeypatch.setattr(tf.io.gfile, "GFile", _RefusingGFile)
    with pytest.raises(DataError, match=located(path, r": permission denied$")):
        load_corpus(path.rpartition("/")[0])


def test_read_error_midway_names_file_and_line(tmp_path, monkeypatch):
    import tensorflow as tf

    path = _on_ram(write_jsonl(tmp_path / "queries.jsonl", [{"_id": f"q{i}", "text": "x" * 100} for i in range(3)]))
    real = tf.io.gfile.GFile

    class Flaky(real):
        def read(self, n=-1):
            if self.tell() > 0:
                raise tf.errors.UnavailableError(None, None, "connection reset\nretry later")
            return super().read(min(n, 200))  # line 1 (126 bytes) and part of line 2

    monkeypatch.setattr(tf.io.gfile, "GFile", Flaky)
    with pytest.raises(DataError, match=located(path, r": cannot read after line 1 \(connection reset\)$")):
        load_queries(path)


@pytest.mark.parametrize(
    "header",
    ["corpus-id\tquery-id\tscore", "qid\tdocid\trel", "query-id\tcorpus-id\tgrade"],
)
def test_qrels_header_must_name_the_columns_in_order(tmp_path, header):
    path = tmp_path / "test.tsv"
    path.write_text(f"{header}\nq1\td1\t1\n")
    names = ", ".join(header.split("\t"))
    with pytest.raises(
        DataError,
        match=located(path, re.escape(f":1: header names columns ({names}); expected query-id, corpus-id, score")),
    ):
        load_qrels(path)


def test_qrels_second_row_with_a_word_score_is_not_a_header(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("q1\td1\t1\nq2\td2\tyes\n")
    with pytest.raises(DataError, match=located(path, r":2: field `score` must be an integer, got 'yes'")):
        load_qrels(path)


@pytest.mark.parametrize("content", ["", "\n", "query-id\tcorpus-id\tscore\n"])
def test_qrels_without_judgements(tmp_path, content):
    path = tmp_path / "test.tsv"
    path.write_text(content)
    with pytest.raises(DataError, match=located(path, r": no judgements$")):
        load_qrels(path)


@pytest.mark.parametrize(
    "name, loader, what",
    [
        ("corpus.jsonl", load_corpus, "documents"),
        ("corpus.jsonl.gz", load_corpus, "documents"),
        ("queries.jsonl", load_queries, "queries"),
    ],
)
def test_empty_corpus_or_queries_file(tmp_path, name, loader, what):
    path = write_jsonl(tmp_path / name, ["", "  "])
    with pytest.raises(DataError, match=located(path, f": no {what}$")):
        loader(tmp_path)


def test_read_texts_empty_jsonl_gives_no_texts(tmp_path):
    assert read_texts(write_jsonl(tmp_path / "corpus.jsonl", [])) == ([], [])


def test_corpus_metadata_is_read_with_one_type_a_field(tmp_path):
    path = write_jsonl(
        tmp_path / "corpus.jsonl",
        [
            {"_id": "d0", "text": "a", "metadata": {"year": 2019, "lang": "en", "tags": ["x"], "open": True}},
            {"_id": "d1", "text": "b", "metadata": {"year": 2020.5, "lang": None}},
            {"_id": "d2", "text": "c"},
        ],
    )
    corpus = load_corpus(path)
    assert corpus.metadata == [{"year": 2019, "lang": "en", "tags": ["x"], "open": True}, {"year": 2020.5}, {}]
    assert load_corpus(write_jsonl(tmp_path / "plain.jsonl", [{"_id": "d0", "text": "a"}])).metadata is None


@pytest.mark.parametrize(
    "records, message",
    [
        (
            [
                {"_id": "d0", "text": "a", "metadata": {"year": 2019}},
                {"_id": "d1", "text": "b", "metadata": {"year": "x"}},
            ],
            "corpus.jsonl:2: document 'd1' field `metadata.year` is a string, but document 'd0' (line 1) has a number",
        ),
        (
            [
                {"_id": "d0", "text": "a", "metadata": {"open": True}},
                {"_id": "d1", "text": "b", "metadata": {"open": 1}},
            ],
            "corpus.jsonl:2: document 'd1' field `metadata.open` is a number, but document 'd0' (line 1) has a boolean",
        ),
        (
            [{"_id": "d0", "text": "a", "metadata": {"tags": [1, 2]}}],
            "corpus.jsonl:1: document 'd0' field `metadata.tags` must be a string, number, boolean or list of strings",
        ),
        ([{"_id": "d0", "text": "a", "metadata": ["en"]}], "corpus.jsonl:1: field `metadata` must be an object"),
    ],
)
def test_corpus_metadata_of_mixed_or_unknown_types_names_the_document_and_field(tmp_path, records, message):
    with pytest.raises(DataError, match=re.escape(message)):
        load_corpus(write_jsonl(tmp_path / "corpus.jsonl", records))


@pytest.mark.parametrize(
    "number", ["1" + "0" * 400, "-" + "9" * 5000, "1e400", "-1e309", "Infinity", "NaN"], ids=lambda n: n[:8]
)
def test_a_metadata_number_that_does_not_fit_a_float64_names_the_file_line_and_field(tmp_path, number):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "d0", "text": "a", "metadata": {"year": 2019}}\n')
    with path.open("a") as f:
        f.write('{"_id": "d1", "text": "b", "metadata": {"lang": "en", "year": ' + number + "}}\n")
    message = f"{path}:2: document 'd1' field `metadata.year` is a number that does not fit a float64"
    with pytest.raises(DataError, match=re.escape(message)):
        load_corpus(path)


def test_the_largest_float64s_are_metadata_numbers(tmp_path):
    records = [{"_id": "d0", "text": "a", "metadata": {"big": 1.7976931348623157e308, "int": 2**1023, "tiny": 5e-324}}]
    assert load_corpus(write_jsonl(tmp_path / "corpus.jsonl", records)).metadata == [records[0]["metadata"]]


def test_queries_metadata_is_not_read(tmp_path):
    path = write_jsonl(tmp_path / "queries.jsonl", [{"_id": "q0", "text": "a", "metadata": {"nested": {"x": 1}}}])
    assert load_queries(path) == {"q0": "a"}
