"""Lines written to stderr by anything but `logging` come out as JSON records; the
command's own fatal error and a traceback as errors, so a log search by level finds them."""

from __future__ import annotations

from controller.service.logs import native_record


def test_a_fatal_error_and_a_traceback_are_errors_other_lines_info() -> None:
    error = native_record("tectl: error: cannot listen on 127.0.0.1:1: Address already in use")
    assert error["level"] == "error" and error["logger"] == "stderr"
    assert native_record("Traceback (most recent call last):")["level"] == "error"
    for kind in ("store", "driver", "solver"):  # the other fatal errors of controller.cli.main
        line = f"tectl: {kind} error: dir:/var/lib/te: holds the state of fabric 'a', not 'b'"
        assert native_record(line)["level"] == "error", kind
    assert native_record("tectl: errors were seen earlier")["level"] == "info"
    assert native_record("a print from somewhere")["level"] == "info"
