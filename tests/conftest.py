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


# The files that train the longest, longest first (CPU seconds on a 2-core Xeon at 5877640, rounded). `make test` runs
# them first (--no-loadscope-reorder keeps this order; xdist would otherwise start with the files holding the most
# tests, most of them cheap, and end on these): the two workers then end within a short file of each other, instead
# of one idling while the other plays out a long file last. An order only: a file missing here runs after these.
LONGEST_FILES_FIRST = [
    "test_checkpoint_jax.py",  # 240
    "test_ppo_atari_envpool_distributed.py",  # 240
    "test_sac_continuous_action_envpool.py",  # 200
    "test_dqn_atari_envpool.py",  # 190
    "test_ppo_atari_envpool_async.py",  # 180
    "test_video.py",  # 160
    "test_td3_continuous_action_envpool.py",  # 150
    "test_ddpg_continuous_action_envpool.py",  # 140
    "test_copied_script.py",  # 120
    "test_ppo.py",  # 110
    "test_ppo_atari_lstm_envpool.py",  # 110
    "test_c51.py",  # 105
    "test_dqn.py",  # 100
    "test_utils_sweep_and_plot.py",  # 100
    "test_ppo_atari_envpool_xla_jax.py",  # 100
]


def pytest_collection_modifyitems(config, items):
    rank = {name: position for position, name in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order
