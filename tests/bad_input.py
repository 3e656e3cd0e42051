"""The bad-input test every script's test file shares. A file lists its bad command lines as BAD_INPUT, (flags,
expected fragments) pairs, and imports this test by name; conftest.py parametrises it with them and runs them all
in one interpreter (the bad_input_outcomes fixture)."""

import os

from helpers import assert_one_error_line


def test_bad_input_gives_one_clear_line_and_writes_nothing(bad_input, bad_input_outcomes):
    """Through the real command line: one line on stderr, `error: ...` naming the bad value, a non-zero exit, no
    traceback, and no run folder. Library warning lines (EnvPool's gym logger) do not count."""
    flags, fragments = bad_input
    outcome = bad_input_outcomes[tuple(flags)]
    assert_one_error_line(outcome.result, fragments, ignore_warnings=True)
    assert not outcome.log_dir.exists() or not os.listdir(outcome.log_dir)
