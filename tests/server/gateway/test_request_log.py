import io
import json
import logging

from gtr_keras.server.gateway.request_log import MAX_ID_LENGTH, AccessLog, request_id


def test_a_usable_request_id_is_kept_and_any_other_replaced():
    for kept in ("a", "checkout-42", "~" * MAX_ID_LENGTH, "00-4bf92f35-01"):
        assert request_id(kept) == kept
    made = [request_id(given) for given in (None, "", "two words", "x" * (MAX_ID_LENGTH + 1), "tab\t", "caf\xe9")]
    assert all(len(identity) == 32 for identity in made) and len(set(made)) == len(made)


def test_a_json_line_holds_the_request_s_fields_and_nothing_else():
    stream = io.StringIO()
    AccessLog("json", stream).write("id-1", "POST", "/v1/embeddings", 200, 0.0123456, "127.0.0.1:5000")
    (line,) = stream.getvalue().splitlines()
    entry = json.loads(line)
    assert entry["time"].endswith("Z") and entry.pop("time")
    assert entry == {
        "request_id": "id-1",
        "method": "POST",
        "path": "/v1/embeddings",
        "status": 200,
        "duration_ms": 12.346,
        "client": "127.0.0.1:5000",
    }


def test_a_text_line_escapes_what_a_path_could_forge():
    stream = io.StringIO()
    AccessLog("text", stream).write("id-2", "GET", '/x"\n200 forged', 404, 0.5, "-")
    (line,) = stream.getvalue().splitlines()
    assert line.endswith('- "GET /x\\"\\n200 forged" 404 500.0ms id=id-2')


def test_without_a_stream_a_line_is_logged_for_the_program_to_route(caplog, capsys):
    caplog.set_level(logging.INFO, logger="gtr_keras")
    AccessLog("text").write("id-3", "GET", "/health", 200, 0.001, "-")
    (record,) = caplog.records
    assert record.name == "gtr_keras.server.gateway.request_log" and record.levelno == logging.INFO
    assert record.getMessage().endswith('- "GET /health" 200 1.0ms id=id-3')
    assert capsys.readouterr() == ("", "")
