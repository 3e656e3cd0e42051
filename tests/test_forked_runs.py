"""The warm interpreter the script runs fork (tests/forked_runs.py, helpers.run_python): a run there ends as a fresh
interpreter's would, and every test's runs use it, not only the first test's (pytest sets PYTEST_CURRENT_TEST anew
for each test: compared whole, the environment differed from the second test on, and every later run was a fresh
process)."""

import os
import subprocess
import sys

import pytest
from helpers import REPO, WARM_INTERPRETER, run_python

PARENT = "import os, sys; print(os.getppid(), os.environ.get('PYTEST_CURRENT_TEST', '').split(' ')[0], sys.argv[1:])"


@pytest.mark.parametrize("test", ["first", "second"])
def test_each_tests_runs_fork_the_warm_interpreter(test):
    result = run_python(["-c", PARENT, "a", "b"])
    parent, current_test, argv = result.stdout.split(" ", 2)
    assert int(parent) == WARM_INTERPRETER["process"].pid
    assert current_test == os.environ["PYTEST_CURRENT_TEST"].split(" ")[0] and test in current_test  # this test's
    assert argv.strip() == "['a', 'b']"


def test_a_run_in_another_environment_is_a_fresh_process():
    result = run_python(["-c", PARENT], env={"OMP_NUM_THREADS": "3"})
    assert int(result.stdout.split(" ")[0]) == os.getpid()


ENDINGS = [
    "print('out'); import sys; sys.exit(3)",
    "import sys; sys.exit('error: one line')",
    "raise ValueError('boom')",
    "raise KeyboardInterrupt",
    "import sys; print('a\\rb', end=''); sys.stderr.write('warned\\n')",
    "import threading, time; threading.Thread(target=lambda: (time.sleep(0.3), print('joined'))).start()",
    "import atexit; atexit.register(print, 'at exit')",
]


@pytest.mark.parametrize("code", ENDINGS)
def test_a_forked_run_ends_as_a_fresh_interpreter_does(code):
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    forked = run_python(["-c", code])
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout)
    # a traceback's last line (the frames above the code differ: the warm interpreter's loop), or the whole stderr
    last = lambda stderr: stderr.strip().splitlines()[-1:] if "Traceback" in stderr else stderr  # noqa: E731
    assert last(forked.stderr) == last(fresh.stderr)
