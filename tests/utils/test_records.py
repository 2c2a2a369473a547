import hashlib
import re

import numpy as np
import pytest

from gtr_keras.errors import DataError
from gtr_keras.utils.records import (
    check_positive_int,
    describe_change,
    read_json_object,
    strings_sha256,
    unreadable_reason,
)


@pytest.mark.parametrize("value", [1, 32, np.int64(7)])
def test_check_positive_int_returns_a_python_int(value):
    checked = check_positive_int(value, "batch_size")
    assert checked == value and type(checked) is int


@pytest.mark.parametrize("value", [0, -3, 2.0, "4", True, None])
def test_check_positive_int_names_the_setting_and_the_value(value):
    with pytest.raises(ValueError, match=re.escape(f"batch_size must be a positive int, got {value!r}.")):
        check_positive_int(value, "batch_size")


def test_read_json_object_returns_the_object(tmp_path):
    path = tmp_path / "retriever.json"
    path.write_text('{"embedding_dim": 768, "kind": "exact"}')
    assert read_json_object(path, "rebuild the index") == {"embedding_dim": 768, "kind": "exact"}


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"{not json", r"unreadable \(.*\)"),
        (b"\xff\xfe", r"unreadable \(.*\)"),
        (b"[1, 2]", "holds a JSON list, not an object"),
        (b'"text"', "holds a JSON str, not an object"),
    ],
)
def test_read_json_object_names_the_file_the_problem_and_the_remedy(tmp_path, content, problem):
    path = tmp_path / "manifest.json"
    path.write_bytes(content)
    with pytest.raises(DataError, match=f"^{re.escape(str(path))}: {problem}; delete it to start over$"):
        read_json_object(path, "delete it to start over")


def test_read_json_object_of_a_missing_file_names_it_once(tmp_path):
    path = tmp_path / "absent.json"
    with pytest.raises(DataError) as error:
        read_json_object(path, "rebuild the index")
    assert str(error.value).startswith(f"{path}: unreadable (") and str(error.value).count(str(path)) == 1


def test_unreadable_reason_drops_only_the_leading_path():
    assert unreadable_reason(OSError("a/b.json: no such file"), "a/b.json") == "no such file"
    assert unreadable_reason(OSError("permission denied on a/b.json"), "a/b.json") == "permission denied on a/b.json"


def test_describe_change_names_the_first_changed_field_in_the_order_given():
    recorded = {"piece_size": 2048, "document_length": 512, "model": "m"}
    current = {"document_length": 256, "piece_size": 40}
    assert describe_change(recorded, current) == "document_length 512 recorded, now 256"
    assert describe_change(recorded, {"piece_size": 40}, "this run has") == "piece_size 2048 recorded, this run has 40"


def test_describe_change_of_matching_records_is_none_and_extra_recorded_fields_do_not_count():
    assert describe_change({"a": 1, "b": [2, 3], "extra": 0}, {"a": 1, "b": [2, 3]}) is None


def test_describe_change_names_a_field_that_was_not_recorded():
    assert describe_change({"a": 1}, {"a": 1, "model_sha256": "x"}) == "no model_sha256 recorded"


def test_describe_change_shortens_sha256_digests():
    old, new = hashlib.sha256(b"old").hexdigest(), hashlib.sha256(b"new").hexdigest()
    assert describe_change({"ids_sha256": old}, {"ids_sha256": new}) == (
        f"ids_sha256 {old[:12]}… recorded, now {new[:12]}…"
    )


def test_strings_sha256_prefixes_each_string_with_its_length():
    assert strings_sha256(["ab", "c"]) != strings_sha256(["a", "bc"])
    assert strings_sha256([]) == hashlib.sha256().hexdigest()
    expected = hashlib.sha256((2).to_bytes(8, "little") + b"ab").hexdigest()
    assert strings_sha256(["ab"]) == expected


def test_strings_sha256_hashes_str_as_its_utf8_bytes_lone_surrogates_included():
    assert strings_sha256(["café"]) == strings_sha256(["café".encode()])
    assert strings_sha256(["\udcff"]) == strings_sha256(["\udcff".encode("utf-8", "surrogatepass")])


def test_a_record_nested_deeper_than_python_can_parse_is_named(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match=r"deep\.json: unreadable \(maximum recursion depth exceeded.*; rebuild it"):
        read_json_object(str(path), "rebuild it")
