import hmac
import logging
import os

import pytest

from gtr_keras.errors import UserError
from gtr_keras.server.gateway import keys as keys_module
from gtr_keras.server.gateway.keys import ApiKeys, read_keys_file


def test_a_bearer_key_among_the_configured_ones_passes_and_no_other():
    keys = ApiKeys(["sk-one", "sk-two"])
    assert keys.allows("Bearer sk-one") and keys.allows("bearer sk-two") and keys.allows("BEARER  sk-two ")
    for refused in (None, "", "sk-one", "Bearer", "Bearer ", "Bearer sk-on", "Bearer sk-one1", "Basic sk-one"):
        assert not keys.allows(refused), refused
    assert not keys.allows("Bearer sk-\xe9")  # a header's latin-1 text that no key holds


def test_every_configured_key_is_compared_whatever_the_first_gave(monkeypatch):
    compared, compare = [], hmac.compare_digest

    def counting(given, key):
        compared.append(key)
        return compare(given, key)

    monkeypatch.setattr(keys_module.hmac, "compare_digest", counting)
    keys = ApiKeys(["sk-a", "sk-b", "sk-c"])
    assert keys.allows("Bearer sk-a")
    assert compared == [b"sk-a", b"sk-b", b"sk-c"]


def test_the_file_s_keys_comments_and_blank_lines(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# rotated monthly\nsk-file-1\n\n  sk-file-2  \n")
    assert read_keys_file(path) == ["sk-file-1", "sk-file-2"]
    keys = ApiKeys(["sk-flag"], path)
    assert all(keys.allows(f"Bearer {key}") for key in ("sk-flag", "sk-file-1", "sk-file-2"))


@pytest.mark.parametrize(
    "text, message",
    [
        ("sk-good\nsk bad\n", r"keys:2: a key must be printable ASCII without spaces \(the key is not shown\)"),
        ("sk-good\nsk-caf\xe9\n", r"keys:2: a key must be printable ASCII"),
        ("# none yet\n\n", r"keys: holds no key"),
    ],
)
def test_a_malformed_keys_file_is_refused_naming_the_line_never_the_key(tmp_path, text, message):
    path = tmp_path / "keys"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=message) as raised:
        ApiKeys(path=path)
    assert "sk bad" not in str(raised.value) and "caf" not in str(raised.value)


def test_bad_flags_and_paths_are_refused():
    with pytest.raises(UserError, match=r"--api-key: a key must be printable ASCII"):
        ApiKeys(["sk\tx"])
    with pytest.raises(UserError, match="must be a local file"):
        ApiKeys(path="gs://bucket/keys")
    with pytest.raises(UserError, match="cannot read it"):
        ApiKeys(path="/no/such/keys")


def _touch(path, text, step):
    path.write_text(text)
    status = os.stat(path)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + step))  # a new modification time for sure


def test_a_changed_file_is_read_again_and_a_key_rotates_without_a_restart(tmp_path):
    path = tmp_path / "keys"
    path.write_text("sk-old\n")
    keys = ApiKeys(path=path, recheck=0.0)
    assert keys.allows("Bearer sk-old")
    _touch(path, "sk-new\n", 10**9)
    assert keys.allows("Bearer sk-new") and not keys.allows("Bearer sk-old")
    replacement = tmp_path / "keys.next"
    replacement.write_text("sk-renamed\n")
    os.replace(replacement, path)  # a new inode, as a mounted secret's swap
    assert keys.allows("Bearer sk-renamed") and not keys.allows("Bearer sk-new")


def test_the_file_is_looked_at_no_more_than_once_a_recheck(tmp_path, monkeypatch):
    path = tmp_path / "keys"
    path.write_text("sk-old\n")
    looks = []
    stat = keys_module._stamp
    monkeypatch.setattr(keys_module, "_stamp", lambda path: looks.append(path) or stat(path))
    keys = ApiKeys(path=path, recheck=3600.0)
    _touch(path, "sk-new\n", 10**9)
    assert all(keys.allows("Bearer sk-old") for _ in range(100))
    assert len(looks) == 1  # at start only


def test_a_file_turned_malformed_or_unreadable_keeps_the_keys_read_before(tmp_path, caplog):
    path = tmp_path / "keys"
    path.write_text("sk-old\n")
    keys = ApiKeys(["sk-flag"], path, recheck=0.0)
    _touch(path, "sk-old\nnot a key\n", 10**9)
    assert keys.allows("Bearer sk-old") and keys.allows("Bearer sk-old")
    (warned,) = [record for record in caplog.records if "the keys read before stay in effect" in record.message]
    assert warned.levelno == logging.WARNING and "keys:2:" in warned.message and "not a key" not in caplog.text
    caplog.clear()
    path.unlink()
    assert keys.allows("Bearer sk-old") and "cannot read it" in caplog.text
    path.write_text("")  # emptied: the flags' keys alone
    assert not keys.allows("Bearer sk-old") and keys.allows("Bearer sk-flag")
