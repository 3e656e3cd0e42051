"""Fixtures that several test files share; helpers.py holds the plain functions."""

import os
from types import SimpleNamespace

import pytest
from helpers import only_run_dir, run_script, run_script_cases


@pytest.fixture(autouse=True)
def process_state_is_each_tests_own():
    """The run plumbing keeps what a process did in module globals of cleanrl_utils.stop: run folders it locked, saves
    it completed, children it started. A test that writes a run in-process (make_writer) and then moves its folder left
    that folder's lock behind, and every later test on that worker saw "the run folder ... was moved" (CI at 7e58ff4).
    Each global is put back as it was before the test, in place, and the descriptors of locks taken meanwhile closed."""
    from cleanrl_utils import stop

    kept = {
        name: (value, value.copy())
        for name, value in vars(stop).items()
        if name.isupper() and isinstance(value, list | set | dict)
    }
    yield
    for descriptor in set(stop.RUN_FOLDER_LOCKS.values()) - set(kept["RUN_FOLDER_LOCKS"][1].values()):
        try:
            os.close(descriptor)
        except OSError:
            pass
    for value, before in kept.values():
        value.clear()
        value.update(before) if isinstance(value, set | dict) else value.extend(before)


@pytest.fixture(scope="module")
def learning_run(request, tmp_path_factory) -> str:
    """The test module's learning run: its SCRIPT with its LEARNING_RUN flags and --save-model, in a folder of its
    own; the run folder. Each file that uses it sets both constants, with the calibration beside them."""
    module = request.module
    log_dir = tmp_path_factory.mktemp("learning_run")
    result = run_script(module.SCRIPT, *module.LEARNING_RUN, "--save-model", "--log-dir", str(log_dir), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return only_run_dir(log_dir)


@pytest.fixture(scope="module")
def bad_input_outcomes(request, tmp_path_factory) -> dict:
    """What a user sees for each bad command line of the test module, its BAD_INPUT list of (flags, expected
    fragments) pairs, run for its SCRIPT with a --log-dir of its own (to check nothing was written), all in one
    interpreter (tests/script_cases.py). Flags as a tuple -> namespace(result, log_dir)."""
    module = request.module
    cases = [list(flags) for flags, _ in module.BAD_INPUT]
    base = tmp_path_factory.mktemp("bad_input")
    log_dirs = [base / str(i) for i in range(len(cases))]
    results = run_script_cases(module.SCRIPT, [[*flags, "--log-dir", str(d)] for flags, d in zip(cases, log_dirs)])
    return {tuple(flags): SimpleNamespace(result=r, log_dir=d) for flags, r, d in zip(cases, results, log_dirs)}


def pytest_generate_tests(metafunc):
    """The shared bad-input test (tests/bad_input.py) runs once per entry of its file's BAD_INPUT."""
    if "bad_input" in metafunc.fixturenames:
        cases = metafunc.module.BAD_INPUT
        metafunc.parametrize("bad_input", cases, ids=[" ".join(flags) for flags, _ in cases])


@pytest.fixture(scope="module")
def pendulum_run(learning_run) -> str:
    """The learning run of the Pendulum-learning files (SAC, TD3, DDPG): `learning_run` by its old name."""
    return learning_run
