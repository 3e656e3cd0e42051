"""A warm interpreter that forks one child per script run: `python tests/forked_runs.py`, driven by helpers.run_python.

A fresh `python cleanrl/X.py` spends about 3.5 CPU seconds importing torch, EnvPool (which imports JAX and
matplotlib) and the rest before its first step, and the suite starts a few hundred of them (a 512-step ppo.py run:
3.6-3.9 CPU s fresh, 0.85 forked, on the 2-core Xeon). Here those imports are paid once per pytest worker. Each run is then a fork of this process that becomes the
script's interpreter: file descriptors 0, 1 and 2 from /dev/null and the run's own output files, `sys.argv` and
`sys.path[0]` as `python script.py` sets them, and the script run as `__main__`. The child never returns to the loop
below: the script's SystemExit, its uncaught exception or its end unwinds to the top of this file, and the child
exits as an interpreter does (threads joined, atexit run, a traceback or the SystemExit message on stderr, an
uncaught KeyboardInterrupt as SIGINT).

What this process imports before a fork must not read anything a run may change: its environment is the pytest
worker's (helpers.warm_interpreter starts it again when that changes), a run's may differ only in variables read at
run time (helpers.RUN_TIME_VARIABLES), and a run given any other gets a real process. It imports neither
MuJoCo (MUJOCO_GL is read on import) nor anything that starts work: numpy's OpenBLAS threads are re-made after a
fork, torch's and JAX's pools are made on first use, in the child.

Protocol, one JSON line each way: {"argv", "env", "stdout", "stderr"} in; {"pid"} out when the child starts,
then {"returncode"} (negative: killed by that signal, as subprocess reports it) when it ends."""

import gc
import json
import os
import runpy
import sys

import envpool  # noqa: F401  (imports JAX when it is installed)
import flax  # noqa: F401
import gymnasium  # noqa: F401
import numpy  # noqa: F401
import optax  # noqa: F401
import torch  # noqa: F401
import torch._dynamo  # noqa: F401  (torch.optim imports it on a run's first optimizer: 2 s)
import tyro  # noqa: F401
from torch.utils.tensorboard import SummaryWriter  # noqa: F401

import cleanrl_utils.checkpoint  # noqa: F401
import cleanrl_utils.checks  # noqa: F401
import cleanrl_utils.run  # noqa: F401
import cleanrl_utils.stop  # noqa: F401


def become_the_run(request: dict) -> None:
    """In the forked child: set up as `python <argv>` (a script and its arguments, `-m module ...` or `-c code ...`)
    with its output in the given files and `env` as its environment (which differs from this process's only in
    variables read at run time: helpers.run_python), and run
    it; returns only if it ends without a SystemExit, and then the child exits 0 through the top of the file."""
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY)
    err = os.open(request["stderr"], os.O_WRONLY)
    for descriptor, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(descriptor, target)
        os.close(descriptor)
    os.environ.clear()
    os.environ.update(request["env"])
    argv = request["argv"]
    if argv[0] == "-m":  # as `python -m`: the current folder first on the path, the module's file as argv[0]
        sys.argv, sys.path[0] = [argv[1], *argv[2:]], os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":  # as `python -c`: "" first on the path, run in __main__'s namespace
        sys.argv, sys.path[0] = ["-c", *argv[2:]], ""
        exec(compile(argv[1], "<string>", "exec"), vars(sys.modules["__main__"]))
    else:  # as `python script.py`: the script's folder first on the path
        sys.argv, sys.path[0] = list(argv), os.path.dirname(argv[0])
        runpy.run_path(argv[0], run_name="__main__")


def serve() -> None:
    # The imports' objects out of the collector's sight: a child's collections (and the one at its exit) would touch
    # every one of them, and each touch copies a shared page (0.85 CPU s a run against 1.75 without).
    gc.freeze()
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            become_the_run(request)
            raise SystemExit(0)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    serve()
