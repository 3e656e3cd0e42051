"""benchmark/lever_ab.py refuses bad input in one line before it spends a training run (trial 11, N2: equal --values
crashed with a FileExistsError traceback after a full run)."""

import os
import subprocess
import sys

import pytest
from helpers import REPO


@pytest.mark.parametrize(
    "flags, fragments",
    [
        (["--flag", "channels-last", "--values", "on", "on"], ["--values on on are the same value"]),
        # trial 12: the same value spelled twice ran as an A/B
        (["--flag", "torch-threads", "--values", "1", "01"], ["--values 1 01 are the same value", "--torch-threads 1)"]),
        (["--flag", "channels-last", "--values", "on", "maybe"], ["refuses --channels-last maybe", "'maybe'"]),
        (["--flag", "channel-last", "--values", "on", "off"], ["refuses --channel-last on", "--channels-last"]),
        (["--flag", "channels-last", "--values", "on", "off", "--steps", "100"], ["--steps 100 must be more than"]),
        # trial 29: one SPS point in the window (1,000), and a ZeroDivisionError traceback after both runs
        (
            ["--flag", "channels-last", "--values", "on", "off", "--steps", "1400", "--from-step", "300"],
            ["--steps 1400 from --from-step 300 holds fewer than two of the SPS points", "give --steps 2000 or more"],
        ),
        # trial 12, P1: a value the script's own checks refuse was found only after the other value's full run
        (["--flag", "torch-threads", "--values", "0", "100000"], ["refuses --torch-threads 100000", "must be in 0.."]),
        (["--flag", "torch-threads", "--values", "1", "-3"], ["refuses --torch-threads -3", "must be in 0.."]),
        (["--flag", "channels-last", "--values", "on", "off", "--repeats", "0"], ["--repeats must be >= 1, got 0"]),
        # trial 13, Q1: checked without the run's --total-timesteps, a --learning-starts past it failed only in a run
        (["--flag", "learning-starts", "--values", "100", "3500", "--steps", "3001"], ["refuses --learning-starts 3500"]),
        # trial 13, Q2: the tool's own flags came last and won: A and B ran alike and a ratio was printed
        (["--flag", "total-timesteps", "--values", "5000", "8000"], ["--flag total-timesteps is set by this tool"]),
        (["--flag", "log-dir", "--values", "/tmp/a", "/tmp/b"], ["--flag log-dir is set by this tool"]),
        (["--flag", "total_timesteps", "--values", "5000", "8000"], ["--flag total-timesteps is set by this tool"]),
        (["--flag", "log_dir", "--values", "x", "y"], ["--flag log-dir is set by this tool"]),  # trial 14: either spelling
        (["--flag", "help", "--values", "a", "b"], ["--help is not a setting of c51_atari_envpool's runs"]),
    ],
)
def test_bad_input_is_one_line_before_any_run(flags, fragments, tmp_path):
    command = [sys.executable, os.path.join(REPO, "benchmark", "lever_ab.py"), "--script", "c51_atari_envpool", *flags]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    words = lines[0].lower().split()
    assert all(words[i : i + 2] != words[i + 2 : i + 4] for i in range(len(words) - 3)), lines[0]  # tyro's title once
    assert "SPS" not in result.stdout  # no run was made


def test_help_says_the_whole_first_paragraph():
    """Trial 13: `--help` described the tool with the docstring's first line, cut off mid-sentence."""
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmark", "lever_ab.py"), "--help"], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0 and "cannot decide a default." in " ".join(result.stdout.split()), result.stdout
