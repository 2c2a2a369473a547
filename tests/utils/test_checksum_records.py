import json

import pytest

from gtr_keras.errors import DataError
from gtr_keras.utils import checksum_records
from gtr_keras.utils.checksum_records import after_change, new_record, parse, sealed, while_changing

A = {"sha256": "a" * 64, "size": 3}
B = {"sha256": "b" * 64, "size": 4}


def _record():
    return new_record({"ids.txt": A, "scann/x.npy": B}, {"segment-000001": "1" * 32})


def test_a_sealed_record_reads_back_and_every_changed_byte_of_it_is_named():
    record = _record()
    data = sealed(record)
    assert parse(data, "d/checksums.json") == {**record, "seal": json.loads(data)["seal"]}
    for offset in range(len(data)):
        for changed in (data[:offset] + bytes([data[offset] ^ 0x01]) + data[offset + 1 :], data[:offset]):
            with pytest.raises(DataError, match=r"^d/checksums\.json: "):
                parse(changed, "d/checksums.json")


def test_a_record_of_another_format_or_with_a_path_leaving_its_directory_is_refused():
    with pytest.raises(DataError, match="format 3 .*reads format 2"):
        parse(json.dumps({"format": 3, "algorithm": "sha256", "files": {}}).encode(), "c.json")
    for path in ("../x", "/etc/passwd", "a//b", "./a"):
        with pytest.raises(DataError, match="is not a path below the directory"):
            parse(sealed(new_record({path: A})), "c.json")
    with pytest.raises(DataError, match="is malformed"):
        parse(sealed(new_record({"x": {"sha256": "a", "size": "3"}})), "c.json")


def test_a_change_first_allows_both_states_then_holds_the_new_one():
    record = _record()
    replaced = {"files": {"ids.txt": B}, "units": {}}
    assert while_changing(record, "ids.txt", replaced)["files"]["ids.txt"] == {"any_of": [A, B]}
    assert after_change(record, "ids.txt", replaced)["files"]["ids.txt"] == B
    removed = {"files": {}, "units": {}}
    during = while_changing(record, "scann", removed)
    assert during["files"]["scann/x.npy"] == {"any_of": [B, None]}
    assert "scann/x.npy" not in after_change(record, "scann", removed)["files"]
    unit = {"files": {}, "units": {"bm25": "2" * 32}}
    assert while_changing(record, "bm25", unit)["units"]["bm25"] == {"any_of": [None, "2" * 32]}
    assert checksum_records.allowed(while_changing(during, "scann", removed)["files"]["scann/x.npy"]) == [B, None]
    assert parse(sealed(during), "c.json")["files"]["scann/x.npy"] == {"any_of": [B, None]}


def test_a_staged_directory_records_its_files_and_its_units_by_id(tmp_path):
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "ids.txt").write_text("a\n")
    unit = checksum_records.write_staged(tmp_path / "index")
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "v.spm").write_bytes(b"xyz")
    checksum_records.write_staged(tmp_path)
    record = parse((tmp_path / "checksums.json").read_bytes(), "c.json")
    assert record["units"] == {"index": unit} and list(record["files"]) == ["assets/v.spm"]
    assert record["files"]["assets/v.spm"]["size"] == 3
