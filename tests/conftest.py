"""Fixtures that several test files share; helpers.py holds the plain functions."""

import pytest
from helpers import only_run_dir, run_script


@pytest.fixture(scope="module")
def pendulum_run(request, tmp_path_factory) -> str:
    """The test module's learning run: its SCRIPT with its LEARNING_RUN flags and --save-model, in a folder of its
    own; the run folder. Each file that uses it sets both constants, with the calibration beside them."""
    module = request.module
    log_dir = tmp_path_factory.mktemp("learning_run")
    result = run_script(module.SCRIPT, *module.LEARNING_RUN, "--save-model", "--log-dir", str(log_dir), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return only_run_dir(log_dir)
