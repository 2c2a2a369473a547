import os

from gtr_keras.utils.native_logs import filtered_native_logs


def test_absl_info_and_warning_lines_are_dropped_and_the_rest_kept(capfd):
    with filtered_native_logs():
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n")
        os.write(2, b"I0000 00:00:1796158618.486109   19952 devices.cc:67] Number of eligible GPUs: 0\n")
        os.write(2, b"W0000 00:00:1796158618.486557   19952 single_machine.cc:376] Starting new session\n")
        os.write(2, b"E0000 00:00:1796158618.486557   19952 op.cc:1] a real error\n")
        os.write(2, b"the converter's own line\n")
    kept = "E0000 00:00:1796158618.486557   19952 op.cc:1] a real error\nthe converter's own line\n"
    assert capfd.readouterr().err == kept
