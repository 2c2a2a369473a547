import logging
import subprocess
import sys

from command_line import empty_model_dir
from conftest import REPO

from gtr_keras.cli.helpers.console import console_logging
from gtr_keras.cli.main import main

LIBRARY = logging.getLogger("gtr_keras.tuning.tuner")


def test_the_block_writes_info_on_stdout_and_warnings_on_stderr_as_they_are(capsys):
    with console_logging():
        LIBRARY.info("%-10s %5.1f", "setting", 2.5)
        LIBRARY.warning("gtr-keras serve: note: serving generation %d for now", 3)
        LIBRARY.debug("not shown")
    assert capsys.readouterr() == ("setting      2.5\n", "gtr-keras serve: note: serving generation 3 for now\n")


def test_after_the_block_the_logger_is_as_it_was(capsys):
    logger = logging.getLogger("gtr_keras")
    before = (logger.level, list(logger.handlers))
    with console_logging():
        assert logger.level == logging.INFO and len(logger.handlers) == len(before[1]) + 1
    assert (logger.level, logger.handlers) == before
    LIBRARY.info("after")
    assert capsys.readouterr().out == ""


def test_a_traceback_logged_follows_its_message(capsys):
    try:
        raise KeyError("bug")
    except KeyError as error:
        with console_logging():
            LIBRARY.error("failed", exc_info=error)
    err = capsys.readouterr().err
    assert err.startswith("failed\nTraceback (most recent call last):\n") and err.endswith("KeyError: 'bug'\n")


def test_a_command_shows_the_library_s_lines_on_the_streams_its_prints_went_to(tmp_path, monkeypatch, capsys):
    from gtr_keras.cli.commands import encode

    def logging_run(args):
        LIBRARY.info("a progress line")
        LIBRARY.warning("a note")

    monkeypatch.setattr(encode, "run", logging_run)
    (tmp_path / "x.txt").write_text("a\n")
    output = str(tmp_path / "o.npy")
    argv = ["encode", "--model", empty_model_dir(tmp_path), "--input", str(tmp_path / "x.txt"), "--output", output]
    assert main(argv) == 0
    assert capsys.readouterr() == ("a progress line\n", "a note\n")


def test_without_a_handler_the_library_keeps_info_silent_and_writes_warnings_on_stderr():
    script = (
        "import gtr_keras, logging\n"
        "from gtr_keras.server.gateway import request_log\n"
        "assert logging.getLogger('gtr_keras').handlers == [] and logging.getLogger().handlers == []\n"
        "request_log.AccessLog('text').write('id', 'GET', '/health', 200, 0.001, '-')\n"
        "logging.getLogger('gtr_keras.tuning.tuner').warning('a warning')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (result.stdout, result.stderr) == ("", "a warning\n")
