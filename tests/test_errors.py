import sys

import pytest

from gtr_keras.errors import (
    BusyError,
    CheckpointError,
    DataError,
    DataWarning,
    MismatchError,
    OverloadedError,
    RetryLaterError,
    TrainingError,
    UserError,
    run_script,
)


@pytest.mark.parametrize("error", [DataError, CheckpointError, MismatchError, TrainingError])
def test_every_user_error_is_a_user_error_and_a_value_error(error):
    assert issubclass(error, UserError) and issubclass(error, ValueError)


@pytest.mark.parametrize("error", [BusyError, OverloadedError])
def test_a_held_output_or_a_full_queue_is_to_retry_later_not_a_users_mistake(error):
    assert issubclass(error, RetryLaterError)
    assert not issubclass(error, ValueError) and not issubclass(RetryLaterError, UserError)
    with pytest.raises(RetryLaterError):
        try:
            raise error("in use by another gtr-keras run")
        except UserError:
            pytest.fail("caught as the user's mistake")


def test_a_data_warning_is_a_user_warning_not_an_error():
    assert issubclass(DataWarning, UserWarning) and not issubclass(DataWarning, UserError)


def _exit_status(main, monkeypatch, script="/repo/recipes/train.py"):
    monkeypatch.setattr(sys, "argv", [script, "--steps", "2"])
    with pytest.raises(SystemExit) as exit_info:
        run_script(main)
    return exit_info.value.code


@pytest.mark.parametrize("status", [0, 3])
def test_run_script_exits_with_what_main_returns(status, monkeypatch, capsys):
    assert _exit_status(lambda: status, monkeypatch) == status
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "error",
    [
        DataError("corpus.jsonl:3: missing field `text`"),
        FileNotFoundError("corpus.jsonl: no such file"),
        BusyError("out: in use by another gtr-keras run (train.py, pid 7 on host)"),
    ],
)
def test_run_script_reports_a_user_error_retry_later_or_os_error_as_one_line_and_exit_2(error, monkeypatch, capsys):
    def main():
        raise error

    assert _exit_status(main, monkeypatch) == 2
    assert capsys.readouterr().err == f"train.py: error: {error}\n"


def test_run_script_joins_a_message_of_several_lines_into_one(monkeypatch, capsys):
    def main():
        raise MismatchError("pieces of other texts\n\n   delete work/ to start over  \n")

    assert _exit_status(main, monkeypatch) == 2
    assert capsys.readouterr().err == "train.py: error: pieces of other texts; delete work/ to start over\n"


def test_run_script_lets_a_bug_keep_its_traceback(monkeypatch):
    def main():
        raise KeyError("bug")

    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(KeyError, match="bug"):
        run_script(main)
