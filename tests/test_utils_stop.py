"""cleanrl_utils.stop: what Ctrl-C and SIGTERM do at start-up and during training, on real processes
with real signals. Each child prints a line once its handlers are in place and then waits, so a
signal always lands where the test means it to (no race with the child's end)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import REPO

from cleanrl_utils.stop import SAME_STOP_SECONDS, stopped_line


def start(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def wait_for(process: subprocess.Popen, text: str) -> str:
    """Read the child's stdout until a line holding `text` (the hand-shake)."""
    seen = ""
    for line in process.stdout:
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"child ended before printing {text!r}: {seen}{process.stderr.read()}")


def finish(process: subprocess.Popen) -> tuple[str, str]:
    """communicate(), and where the child has not exited within a minute, its state in the failure: a fresh-clone
    suite at 03dd8f9 saw one child write nothing for 20 s after its SIGINT, and the state says where it waited."""
    try:
        return process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        with open(f"/proc/{process.pid}/status") as file:
            state = [line.strip() for line in file if line.startswith(("State", "Sig", "Shd", "Threads"))]
        with open(f"/proc/{process.pid}/wchan") as file:
            state.append(f"wchan: {file.read()}")
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(f"the child did not exit: {state}; stdout {stdout!r}; stderr {stderr!r}") from None


def stderr_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


STARTUP = """
    import time
    from cleanrl_utils.stop import exit_at_once_on_signals
    exit_at_once_on_signals()
    print("ready", flush=True)
    time.sleep(60)
    print("still running", flush=True)
"""


@pytest.mark.parametrize("signum,name", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM"), (signal.SIGHUP, "SIGHUP")])
def test_a_signal_during_start_up_exits_at_once_with_one_line(signum, name):
    process = start(STARTUP)
    wait_for(process, "ready")
    process.send_signal(signum)
    stdout, stderr = finish(process)
    assert process.returncode == 128 + signum
    assert "still running" not in stdout
    assert stderr_lines(stderr) == [f"{name} during start-up: exiting before training began"]


# multiprocessing as a Ctrl-C finds it when it lands while that module is being imported: partially initialised,
# with no active_children yet (trial 28: the suite's timed start-up test hit it once in 7 delays).
STARTUP_WHILE_MULTIPROCESSING_LOADS = """
    import sys, time, types
    from cleanrl_utils.stop import exit_at_once_on_signals
    exit_at_once_on_signals()
    sys.modules["multiprocessing"] = types.ModuleType("multiprocessing")
    print("ready", flush=True)
    time.sleep(60)
"""


def test_a_signal_while_multiprocessing_is_half_imported_still_exits_with_one_line():
    process = start(STARTUP_WHILE_MULTIPROCESSING_LOADS)
    wait_for(process, "ready")
    process.send_signal(signal.SIGINT)
    _, stderr = finish(process)
    assert process.returncode == 128 + signal.SIGINT, stderr
    assert stderr_lines(stderr) == ["Ctrl-C during start-up: exiting before training began"]


# 30 frames of noise, slow to encode, still in ffmpeg's pipe and buffers (x264 looks 40 ahead) when the process exits
EXIT_WHILE_ENCODING = """
    import sys
    import numpy as np
    from cleanrl_utils.stop import _exit_now
    from cleanrl_utils.video import VideoWriter
    writer = VideoWriter(sys.argv[1], fps=30)
    rng = np.random.default_rng(0)
    for _ in range(30):
        writer.append(rng.integers(0, 256, (240, 240, 3), dtype=np.uint8))
    _exit_now(143)
"""


def test_a_stop_waits_for_the_video_encoders_to_end_their_files(tmp_path):
    """Trial 28: a SIGTERM to evaluate while it filmed 20 Atari games left the ffmpeg encoders (each in a process group
    of its own, by imageio's design) encoding on, orphaned, and the .partial.mp4 files 48 bytes long when it exited."""
    from cleanrl_utils.video import mp4_is_whole

    path = str(tmp_path / "eval-episode-0.mp4")
    with open(tmp_path / "output", "w") as output:  # a file, not a pipe: ffmpeg inherits it, and a pipe's reader
        # would wait for ffmpeg's end too, where only the process's own end counts
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(EXIT_WHILE_ENCODING), path], stdout=output, stderr=output, timeout=120
        )
    assert result.returncode == 143, (tmp_path / "output").read_text()
    partial = str(tmp_path / "eval-episode-0.partial.mp4")
    assert subprocess.run(["pgrep", "-f", partial], capture_output=True).stdout == b""  # no encoder left running
    assert mp4_is_whole(partial)  # its encoder ended it: indexed, playable, named partial


STARTUP_WITH_A_RUN_FOLDER = """
    import sys, time
    from types import SimpleNamespace
    from cleanrl_utils.stop import exit_at_once_on_signals
    from cleanrl_utils.run import run_folder
    exit_at_once_on_signals()
    args = SimpleNamespace(env_id="CartPole-v1", exp_name="ppo", seed=1, log_dir=sys.argv[1])
    run_folder(args, sys.argv[2] if len(sys.argv) > 2 else None)  # prints "run folder: ..."
    time.sleep(60)
"""


def test_a_signal_during_start_up_removes_the_fresh_run_folder_but_never_a_resumed_one(tmp_path):
    """Trial 15, S5: a stop between "run folder:" and training left an empty folder that --resume could not use.
    Trial 19: the --log-dir made for it stayed, empty; it goes too, and a --log-dir that was there stays. A resumed
    run's folder is the run's own: it stays, with its checkpoint."""
    new_log_dir = tmp_path / "My Runs" / "deeper"
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(STARTUP_WITH_A_RUN_FOLDER), str(new_log_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    folder = wait_for(process, "run folder:").split("run folder: ")[1].strip()
    process.send_signal(signal.SIGINT)
    _, stderr = finish(process)
    assert stderr_lines(stderr) == [
        f"Ctrl-C during start-up: exiting before training began; removed its run folder {folder} and the --log-dir "
        f"{tmp_path / 'My Runs'} made for it, where nothing was saved"
    ]
    assert os.listdir(tmp_path) == []
    runs = tmp_path / "runs"
    runs.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(STARTUP_WITH_A_RUN_FOLDER), str(runs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    folder = wait_for(process, "run folder:").split("run folder: ")[1].strip()
    assert os.path.isdir(folder)
    process.send_signal(signal.SIGINT)
    _, stderr = finish(process)
    assert process.returncode == 130
    assert stderr_lines(stderr) == [
        f"Ctrl-C during start-up: exiting before training began; removed its run folder {folder}, where nothing was saved"
    ]
    assert os.listdir(runs) == []
    resumed = runs / "CartPole-v1__ppo__1__1"
    resumed.mkdir()
    (resumed / "checkpoint.pt").write_bytes(b"a checkpoint")
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(STARTUP_WITH_A_RUN_FOLDER), str(runs), str(resumed / "checkpoint.pt")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    wait_for(process, "run folder:")
    process.send_signal(signal.SIGINT)
    _, stderr = finish(process)
    assert stderr_lines(stderr) == ["Ctrl-C during start-up: exiting before training began"]
    assert os.listdir(resumed) == ["checkpoint.pt"]


REFUSED = """
    import resource, sys
    from types import SimpleNamespace
    from cleanrl_utils.stop import COMPLETED_SAVES, exit_at_once_on_signals
    from cleanrl_utils.run import run_folder
    exit_at_once_on_signals()
    run_folder(SimpleNamespace(env_id="CartPole-v1", exp_name="ppo", seed=1, log_dir=sys.argv[1]))
    error, saved, limit = sys.argv[2], sys.argv[3] == "saved", int(sys.argv[4])
    if saved:
        COMPLETED_SAVES.append("runs/x/checkpoint.pt")
    if limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    raise {"memory": MemoryError("out of memory"), "threads": RuntimeError("Resource temporarily unavailable"),
           "import": ImportError("cannot import name 'X' from 'torch._dynamo.utils'"),
           "bug": ValueError("a bug")}[error]
"""


@pytest.mark.parametrize(
    "error, saved, limit, expected",
    [
        ("memory", "fresh", 0, "(no address-space limit; MemoryError: out of memory); removed its run folder"),
        ("threads", "fresh", 0, "(no address-space limit; RuntimeError: Resource temporarily unavailable); removed"),
        ("memory", "saved", 0, "MemoryError: out of memory); its checkpoint runs/x/checkpoint.pt is whole: retry"),
        ("import", "fresh", 8 * 2**30, "(ulimit -v: 8,192 MiB; ImportError: cannot import name 'X'"),
        ("import", "fresh", 0, None),  # no limit: an ImportError is the install's, a traceback
        ("bug", "fresh", 0, None),
    ],
)
def test_the_machine_refusing_memory_is_one_line_and_a_run_folder_with_nothing_saved_goes(
    tmp_path, error, saved, limit, expected
):
    """Trial 15, S1: under `ulimit -v`, torch's and EnvPool's imports, MuJoCo's engine and the allocator failed as
    tracebacks, leaving empty run folders. A real bug keeps its traceback."""
    runs = tmp_path / "runs"
    command = [sys.executable, "-c", textwrap.dedent(REFUSED), str(runs), error, saved, str(limit)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 1
    if expected is None:
        assert "Traceback" in result.stderr and len(os.listdir(runs)) == 1
        return
    (line,) = stderr_lines(result.stderr)
    assert line.startswith("error: the machine refused memory or threads (") and expected in line, line
    assert line.endswith("retry with more memory (ulimit -v, a container's limit), smaller settings, or fewer runs at once")
    if saved == "saved":
        assert len(os.listdir(runs)) == 1
    else:  # the --log-dir made for the run goes with it (trial 19)
        assert not runs.exists(), os.listdir(runs)


FULL_DISK_AFTER_ITERATIONS = """
    import os, sys
    from types import SimpleNamespace
    from cleanrl_utils.stop import exit_at_once_on_signals
    from cleanrl_utils.run import checkpoint_due, run_folder
    exit_at_once_on_signals()
    _, run_dir = run_folder(SimpleNamespace(env_id="CartPole-v1", exp_name="ppo", seed=1, log_dir=sys.argv[1]))
    for iteration in range(1, int(sys.argv[2]) + 1):  # iterations logged, none due for a checkpoint
        assert not checkpoint_due(iteration, 100, 0, stopping=False)
        if iteration == 2:
            os.makedirs(os.path.join(run_dir, "videos", "iteration-2"))
            open(os.path.join(run_dir, "videos", "iteration-2", "eval-episode-0.mp4"), "wb").write(b"a video")
    raise OSError(28, "No space left on device")
"""


@pytest.mark.parametrize("iterations", [0, 3])
def test_a_full_disk_removes_a_fresh_run_folder_only_before_its_first_iteration(tmp_path, iterations):
    """Trial 23, A4: a full disk at 12k steps removed the run folder, with a finished evaluation video and its curves,
    saying "where nothing was saved". A folder that logged an iteration stays; one that did not goes, as before."""
    runs = tmp_path / "runs"
    command = [sys.executable, "-c", textwrap.dedent(FULL_DISK_AFTER_ITERATIONS), str(runs), str(iterations)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    folder = result.stdout.split("run folder: ")[1].strip()
    if iterations:
        assert stderr_lines(result.stderr) == [
            f"error: the disk is full (No space left on device); its run folder {folder} keeps what 3 iterations "
            "logged (its curves, any videos; no checkpoint was saved): free space there, or write elsewhere, and run again"
        ]
        assert open(os.path.join(folder, "videos", "iteration-2", "eval-episode-0.mp4"), "rb").read() == b"a video"
    else:
        assert stderr_lines(result.stderr) == [
            f"error: the disk is full (No space left on device); removed its run folder {folder} and the --log-dir "
            f"{runs} made for it, where nothing was saved: free space there, or write elsewhere, and run again"
        ]
        assert not runs.exists()


def test_an_address_space_limit_below_what_the_libraries_load_under_is_one_line_before_they_load():
    """Below MIN_ADDRESS_SPACE torch's own import aborted in C++ (exit 134, no line): refused before it runs."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (400 * 2**20, resource.RLIM_INFINITY))

    code = "from cleanrl_utils.stop import exit_at_once_on_signals; exit_at_once_on_signals(); import torch"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, preexec_fn=limit)
    assert result.returncode == 1
    assert stderr_lines(result.stderr) == [
        "error: this process may map 400 MiB (ulimit -v), less than the 600 MiB a training script (PyTorch or JAX, "
        "EnvPool or Gymnasium) needs to start (below it the libraries abort with no error line): raise the limit"
    ]


TRAINING = """
    import time
    from cleanrl_utils.stop import StopAfterIteration
    stop = StopAfterIteration()
    print("ready", flush=True)
    iteration = 0
    while not stop.requested:  # the training loop reads the flag once per iteration
        iteration += 1
        time.sleep(0.01)
    print(f"saved and stopped after iteration {iteration}", flush=True)
"""


def test_a_signal_after_the_last_iteration_says_the_run_is_finishing():
    """Trial 24, K10: a Ctrl-C while the run, past its last iteration, waited for its last video said "stopping
    after this iteration", with no iteration left."""
    process = start(
        """
        import time
        from cleanrl_utils.run import checkpoint_due
        from cleanrl_utils.stop import StopAfterIteration
        stop = StopAfterIteration()
        checkpoint_due(4, 4, 0, stopping=False)  # the last iteration is done: the end-of-run work follows
        print("ready", flush=True)
        while not stop.requested:
            time.sleep(0.01)
        print("finished", flush=True)
        """
    )
    wait_for(process, "ready")
    process.send_signal(signal.SIGINT)
    stdout, stderr = finish(process)
    assert process.returncode == 0 and "finished" in stdout, stderr
    assert stderr_lines(stderr) == ["Ctrl-C: the run trained all its iterations and is finishing (a second one aborts)"]


@pytest.mark.parametrize("signum,name", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM"), (signal.SIGHUP, "SIGHUP")])
def test_the_first_signal_in_training_stops_after_the_iteration_with_exit_0(signum, name):
    process = start(TRAINING)
    wait_for(process, "ready")
    process.send_signal(signum)
    stdout, stderr = finish(process)
    assert process.returncode == 0, stderr
    assert "saved and stopped after iteration" in stdout
    assert stderr_lines(stderr) == [f"{name}: stopping after this iteration (a second signal aborts without saving)"]


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_forwarded_at_once_is_the_same_stop_not_a_second(second):
    """Trial 11, N6: under `timeout --foreground` (or torchrun, or a script that traps and forwards), one Ctrl-C
    reaches the run twice within milliseconds: the terminal's and the launcher's copy. The second copy aborted the
    run without saving. Now it is the same stop: the run saves and exits 0, with one line."""
    process = start(SLOW_ITERATION.replace("time.sleep(60)", "time.sleep(2)"))
    wait_for(process, "ready")
    process.send_signal(signal.SIGINT)
    process.send_signal(second)
    stdout, stderr = finish(process)
    assert process.returncode == 0 and "saved" in stdout, stderr
    assert stderr_lines(stderr) == ["Ctrl-C: stopping after this iteration (a second signal aborts without saving)"]


def test_a_copy_of_the_signal_landing_inside_its_own_handler_is_still_one_stop():
    """Trial 12: one Ctrl-C under `timeout --foreground` printed the stopping line twice. The launcher's copy landed
    while the handler for the terminal's copy ran, between its `requested` check and its assignment, and Python ran
    the handler again inside itself. Here the copy is sent from inside the handler, at its clock reading, every
    time: one line, and the run saves."""
    process = start(
        """
        import os, signal, time
        import cleanrl_utils.stop as stop_module
        class ClockThatForwardsTheSignalOnce:
            sent = False
            def monotonic(self):
                if not self.sent:
                    self.sent = True
                    os.kill(os.getpid(), signal.SIGINT)  # Python runs its handler at the next bytecode: inside this one
                    sum(range(1000))
                return time.monotonic()
        stop_module.time = ClockThatForwardsTheSignalOnce()
        stop = stop_module.StopAfterIteration()
        print("ready", flush=True)
        while not stop.requested:
            time.sleep(0.01)
        time.sleep(0.5)
        print("saved", flush=True)
        """
    )
    wait_for(process, "ready")
    process.send_signal(signal.SIGINT)
    stdout, stderr = finish(process)
    assert process.returncode == 0 and "saved" in stdout, stderr
    assert stderr_lines(stderr) == ["Ctrl-C: stopping after this iteration (a second signal aborts without saving)"]


def test_a_signal_after_the_run_is_done_does_not_kill_it_on_its_way_out():
    """Trial 14: SIGTERM stopped a run, which saved, said "stopped at iteration N" and ended; a Ctrl-C 0.3-0.8 s later
    landed while Python shut down and killed it with exit 130 and no line. Once the script's code is done, signals are
    ignored: the signal here comes from an exit callback that runs after the run's own, 1.2 s after the first."""
    process = start(
        """
        import atexit, os, signal, time
        def late_signal():  # registered first, so it runs after StopAfterIteration's callback (last in, first out)
            time.sleep(1.2)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
        atexit.register(late_signal)
        from cleanrl_utils.stop import StopAfterIteration
        stop = StopAfterIteration()
        print("ready", flush=True)
        while not stop.requested:
            time.sleep(0.01)
        print("saved", flush=True)
        """
    )
    wait_for(process, "ready")
    process.send_signal(signal.SIGTERM)
    stdout, stderr = finish(process)
    assert process.returncode == 0 and "saved" in stdout, stderr
    assert stderr_lines(stderr) == ["SIGTERM: stopping after this iteration (a second signal aborts without saving)"]


SLOW_ITERATION = """
    import time
    from cleanrl_utils.stop import StopAfterIteration
    stop = StopAfterIteration()
    print("ready", flush=True)
    while not stop.requested:
        time.sleep(0.01)
    print("flag set; the iteration is still running", flush=True)
    time.sleep(60)  # a long iteration: the second signal must not wait for it
    print("saved", flush=True)
"""


@pytest.mark.parametrize(
    "first,second", [(signal.SIGINT, signal.SIGINT), (signal.SIGINT, signal.SIGTERM), (signal.SIGTERM, signal.SIGINT)]
)
def test_a_second_signal_aborts_at_once_without_saving(first, second):
    process = start(SLOW_ITERATION)
    wait_for(process, "ready")
    process.send_signal(first)
    wait_for(process, "flag set")
    time.sleep(SAME_STOP_SECONDS + 0.2)  # sooner, it is the first signal forwarded (see below)
    process.send_signal(second)
    stdout, stderr = finish(process)
    assert process.returncode == 128 + second
    assert "saved" not in stdout
    lines = stderr_lines(stderr)
    assert len(lines) == 2 and "Traceback" not in stderr
    # trial 29: a Ctrl-C after a SIGTERM read "Ctrl-C again"
    names = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
    said = f"{names[second]} again" if first == second else f"{names[second]} after {names[first]}"
    assert lines[1] == f"{said}: aborted without saving (a checkpoint written before, if any, stays valid)"


SLOW_SAVE = """
    import sys, time
    from cleanrl_utils.checkpoint import write_atomically
    from cleanrl_utils.stop import StopAfterIteration

    stop = StopAfterIteration()
    print("ready", flush=True)
    while not stop.requested:
        time.sleep(0.01)

    def write_slowly(file):
        file.write(b"x" * 1_000_000)
        file.flush()
        print("writing", flush=True)
        time.sleep(60)  # a save of GBs: the second signal lands in the middle of it

    write_atomically(sys.argv[1], write_slowly)
    print("saved", flush=True)
"""


def test_a_second_signal_during_a_save_removes_its_half_written_file(tmp_path):
    """Trial 9, T6: the torn checkpoint.pt.tmp stayed, as large as a checkpoint; with no checkpoint before it nothing
    would ever remove it (only a resume cleans up). The previous checkpoint stays as it was."""
    (tmp_path / "checkpoint.pt").write_bytes(b"the previous checkpoint")
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SLOW_SAVE), str(tmp_path / "checkpoint.pt")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    wait_for(process, "ready")
    process.send_signal(signal.SIGINT)
    wait_for(process, "writing")
    assert (tmp_path / "checkpoint.pt.tmp").stat().st_size == 1_000_000
    time.sleep(SAME_STOP_SECONDS + 0.2)
    process.send_signal(signal.SIGINT)
    stdout, stderr = finish(process)
    assert process.returncode == 130 and "saved" not in stdout and "Traceback" not in stderr
    assert stderr_lines(stderr)[-1].endswith(
        "again: aborted without saving (removed the half-written checkpoint.pt.tmp; a checkpoint written before, if "
        "any, stays valid)"
    )
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]
    assert (tmp_path / "checkpoint.pt").read_bytes() == b"the previous checkpoint"


ASYNC_ENVS = """
    import multiprocessing
    import gymnasium as gym
    from cleanrl_utils.stop import StopAfterIteration, ignore_signals_in_worker

    def make_one():
        if multiprocessing.parent_process() is not None:
            ignore_signals_in_worker()  # as the Gymnasium scripts' make_env does
        return gym.make("CartPole-v1")

    envs = gym.vector.AsyncVectorEnv([make_one, make_one])
    envs.reset(seed=1)
    stop = StopAfterIteration()
    print("ready", flush=True)
    while not stop.requested:
        envs.step(envs.action_space.sample())
    print("flag set; the iteration is still running", flush=True)
    while True:
        envs.step(envs.action_space.sample())
"""


def test_a_second_ctrl_c_to_the_process_group_leaves_no_worker_traceback():
    """Trial 3, D2: a terminal's two Ctrl-C reach the whole process group. The aborting main process left its
    AsyncVectorEnv workers to find their pipes broken, and each printed a ConnectionResetError/BrokenPipeError
    traceback."""
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(ASYNC_ENVS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,
    )
    wait_for(process, "ready")
    os.killpg(process.pid, signal.SIGINT)
    wait_for(process, "flag set")
    time.sleep(SAME_STOP_SECONDS + 0.2)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 130
    assert "Traceback" not in stderr and "Error" not in stderr, stderr
    assert stderr_lines(stderr)[-1].endswith(
        "again: aborted without saving (a checkpoint written before, if any, stays valid)"
    )


# JAX registers a garbage-collection callback (EnvPool imports JAX). An exception raised by a signal
# handler while such a callback runs is printed as "Exception ignored in ..." and the program carries
# on: Ctrl-C was swallowed (issue 16, defect 2). The callback here sleeps, so the signal lands in it.
GC_CALLBACK = """
    import gc, signal, sys, time
    from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals

    mode = sys.argv[1]
    if mode == "start-up":
        exit_at_once_on_signals()
    elif mode == "default":
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own: raises KeyboardInterrupt
    else:
        stop = StopAfterIteration()
    inside = []

    def slow_callback(phase, info):
        if phase == "start" and not inside:
            inside.append(1)
            print("in gc callback", flush=True)
            time.sleep(3)

    gc.callbacks.append(slow_callback)
    gc.collect()
    gc.callbacks.remove(slow_callback)
    print("carried on after the gc callback", flush=True)
    if mode == "training":
        print(f"stop requested: {stop.requested}", flush=True)
"""


def run_gc_callback(mode: str) -> tuple[int, str, str]:
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(GC_CALLBACK), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    wait_for(process, "in gc callback")
    process.send_signal(signal.SIGINT)
    stdout, stderr = finish(process)
    return process.returncode, stdout, stderr


def test_a_signal_landing_in_a_gc_callback_still_stops_the_run():
    # the defect, reproduced with Python's default handler: the interrupt is swallowed
    returncode, stdout, stderr = run_gc_callback("default")
    assert "Exception ignored" in stderr and "KeyboardInterrupt" in stderr
    assert "carried on after the gc callback" in stdout and returncode == 0
    # start-up handler: exits at once, nothing swallowed
    returncode, stdout, stderr = run_gc_callback("start-up")
    assert returncode == 128 + signal.SIGINT
    assert "carried on" not in stdout and "Exception ignored" not in stderr
    assert stderr_lines(stderr) == ["Ctrl-C during start-up: exiting before training began"]
    # training handler: the flag is set (the handler raised nothing into the callback)
    returncode, stdout, stderr = run_gc_callback("training")
    assert returncode == 0 and "Exception ignored" not in stderr and "Traceback" not in stderr
    assert "stop requested: True" in stdout


def test_workers_ignore_both_signals():
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom cleanrl_utils.stop import ignore_signals_in_worker\nignore_signals_in_worker()\n"
            "print('ready', flush=True)\nsys.stdin.readline()\nprint('worker done', flush=True)\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    wait_for(process, "ready")
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate("go\n", timeout=20)
    assert process.returncode == 0 and "worker done" in stdout and stderr == ""


def test_stopped_line_names_the_checkpoint_and_the_resume_command():
    path = os.path.join("runs", "X", "checkpoint.pt")
    assert stopped_line(7, path) == f"stopped at iteration 7; checkpoint: {path} (continue with --resume {path})"


@pytest.mark.parametrize("log_dir", ["My Runs", "it's", "$(touch pwned)", 'a"b'])
def test_the_resume_command_pastes_into_a_shell_as_the_path(tmp_path, log_dir):
    """Trial 19, W1: under --log-dir 'My Runs' the printed `--resume <path>` split in two when pasted (a path with
    $(...) in it ran the command). bash reads the printed command back as exactly the path."""
    path = str(tmp_path / log_dir / "CartPole-v1__ppo__1__1" / "checkpoint.pt")
    command = stopped_line(7, path).split("(continue with ")[1].removesuffix(")")
    pasted = subprocess.run(["bash", "-c", f"printf '%s\\n' {command}"], capture_output=True, text=True, cwd=tmp_path)
    assert pasted.stdout.splitlines() == ["--resume", path], pasted
    assert not (tmp_path / "pwned").exists()


SAVED_THEN_FILMING = """
    import sys, time
    from cleanrl_utils.checkpoint import write_atomically
    from cleanrl_utils.stop import STILL_FILMING, StopAfterIteration

    stop = StopAfterIteration()
    print("ready", flush=True)
    while not stop.requested:
        time.sleep(0.01)
    write_atomically(sys.argv[1], lambda file: file.write(b"the stop's checkpoint"))
    STILL_FILMING.extend(sys.argv[2:])  # what VideoJobs notes while an evaluator films
    print("saved; filming the last video", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("filming", [False, True])
def test_a_second_signal_after_the_stops_checkpoint_says_it_is_whole(tmp_path, filming):
    """Trial 10, D4: the first Ctrl-C's checkpoint was written, then the run waited for its last evaluation video; a
    second Ctrl-C said "aborted without saving", and no line said how to resume. Trial 18: the line said "stopped at
    once" while the video's evaluator, in its own session, went on to finish the video: the line now says so."""
    path = tmp_path / "checkpoint.pt"
    video_dir = os.path.join("runs", "X", "videos", "iteration-9")
    command = [sys.executable, "-c", textwrap.dedent(SAVED_THEN_FILMING), str(path)] + ([video_dir] if filming else [])
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    wait_for(process, "ready")
    process.send_signal(signal.SIGINT)
    wait_for(process, "saved; filming")
    time.sleep(SAME_STOP_SECONDS + 0.2)
    process.send_signal(signal.SIGINT)
    stdout, stderr = finish(process)
    assert process.returncode == 130 and "Traceback" not in stderr
    assert stderr_lines(stderr)[-1] == (
        f"Ctrl-C again: stopped at once; the checkpoint written after the first signal is whole: {path} "
        f"(continue with --resume {path})"
        + (f"; the evaluation video being filmed in {video_dir} is finished by its own process" if filming else "")
    )
    assert path.read_bytes() == b"the stop's checkpoint"


TOOL = """
    import time
    from cleanrl_utils.stop import LEFT_BEHIND, exit_tool_on_signals
    exit_tool_on_signals("cleanrl_utils.some_tool")
    print("ready", flush=True)
    time.sleep(1)
    LEFT_BEHIND.append("out/ holds what was written so far")
    print("writing", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("signum,name", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM"), (signal.SIGHUP, "SIGHUP")])
@pytest.mark.parametrize("moment", ["ready", "writing"])
def test_a_tool_stopped_by_a_signal_says_so_in_one_line(signum, name, moment):
    """Trial 10, D3: Ctrl-C to evaluate, plot or results printed a KeyboardInterrupt traceback of 20-35 lines."""
    process = start(TOOL)
    wait_for(process, moment)
    process.send_signal(signum)
    _, stderr = finish(process)
    assert process.returncode == 128 + signum
    left = "; out/ holds what was written so far" if moment == "writing" else ""
    assert stderr_lines(stderr) == [f"{name}: cleanrl_utils.some_tool stopped{left}"]


@pytest.mark.parametrize("signum,name", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_a_tool_stopped_while_writing_its_first_file_removes_that_file_and_the_folder(tmp_path, signum, name):
    """Trial 23, A5: plot and results stopped while they wrote their first file removed its .tmp but left the folder,
    empty, saying it "holds the plots drawn so far"."""
    out = tmp_path / "plots"
    process = start(
        f"""
        import time
        from cleanrl_utils.stop import exit_tool_on_signals, make_output_dir, written_whole
        exit_tool_on_signals("cleanrl_utils.plot")
        make_output_dir({str(out)!r}, holds="the plots drawn so far")
        with written_whole({str(out / "CartPole-v1.png")!r}, "wb") as file:
            file.write(b"half a figure")
            file.flush()
            print("writing", flush=True)
            time.sleep(60)
        """
    )
    wait_for(process, "writing")
    process.send_signal(signum)
    _, stderr = finish(process)
    assert process.returncode == 128 + signum
    assert stderr_lines(stderr) == [
        f"{name}: cleanrl_utils.plot stopped; removed the half-written CartPole-v1.png.tmp; removed {out}, where "
        "nothing was written"
    ], stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a file every write to fails with ENOSPC")
def test_a_full_disk_under_a_tool_names_the_file(tmp_path):
    """Trial 23, K3: a write's ENOSPC names no file, so the line said "free space there" with no place named."""
    from cleanrl_utils.stop import written_whole

    path = str(tmp_path / "summary.csv")
    os.symlink("/dev/full", path + ".tmp")  # every write to the file being written fails as on a full disk
    with pytest.raises(OSError) as raised:
        with written_whole(path) as file:
            file.write("script,env_id\n" * 10_000)
            file.flush()
    assert raised.value.filename == path and os.listdir(tmp_path) == []


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "MemoryError", "sys.exit"])
def test_a_tool_stopped_before_writing_removes_the_output_folders_it_made(tmp_path, stop):
    """Trial 17, U4: a Ctrl-C to plot (or to evaluate --capture-video) before anything was drawn left the fresh
    output folder and the parents made for it, empty, and the line said it "holds the plots drawn so far". Now each
    way out removes them and says so; a folder that was there before stays; one holding a file stays and is named."""
    (tmp_path / "there").mkdir()
    process = start(
        f"""
        import sys, time
        from cleanrl_utils.stop import exit_tool_on_signals, make_output_dir
        exit_tool_on_signals("cleanrl_utils.some_tool")
        make_output_dir({str(tmp_path / "there" / "a" / "b")!r}, holds="the plots drawn so far")
        make_output_dir({str(tmp_path / "kept")!r}, holds="what was written so far")
        open({str(tmp_path / "kept" / "one.png")!r}, "w").close()
        print("ready", flush=True)
        if {stop!r} == "MemoryError":
            raise MemoryError
        if {stop!r} == "sys.exit":
            sys.exit("error: some tool's refusal")
        time.sleep(60)
        """
    )
    wait_for(process, "ready")
    if stop.startswith("SIG"):
        process.send_signal(getattr(signal, stop))
    _, stderr = finish(process)
    assert sorted(os.listdir(tmp_path)) == ["kept", "there"] and os.listdir(tmp_path / "there") == []
    assert os.listdir(tmp_path / "kept") == ["one.png"]
    removed = f"removed {tmp_path / 'there' / 'a'}, where nothing was written"
    kept = f"{tmp_path / 'kept'} holds what was written so far"
    if stop.startswith("SIG"):
        name = "Ctrl-C" if stop == "SIGINT" else "SIGTERM"
        assert stderr_lines(stderr) == [f"{name}: cleanrl_utils.some_tool stopped; {kept}; {removed}"], stderr
    elif stop == "MemoryError":
        assert stderr_lines(stderr) == [
            f"error: the machine refused memory or threads (no address-space limit; MemoryError); {removed}; {kept}: "
            "retry with more memory (ulimit -v, a container's limit), smaller settings, or fewer runs at once"
        ], stderr
    else:
        assert stderr_lines(stderr) == ["error: some tool's refusal"], stderr


@pytest.mark.parametrize(
    "install, line",
    [
        ("stop_module.exit_tool_on_signals('cleanrl_utils.some_tool')", "Ctrl-C: cleanrl_utils.some_tool stopped"),
        ("stop_module.exit_at_once_on_signals()", "Ctrl-C during start-up: exiting before training began"),
    ],
)
def test_a_copy_of_the_signal_landing_while_the_exit_runs_adds_no_second_line(install, line):
    """Trial 13: under plain `timeout`, one Ctrl-C to `cleanrl_utils.results` printed its stopped line twice: the
    launcher's copy landed after the first line, in the Python code the exit runs (an import), and Python ran the
    handler again there. Here the copy is sent from inside the exit, every time: one line."""
    process = start(
        f"""
        import os, signal, time
        import cleanrl_utils.stop as stop_module
        exit_for_real = stop_module._exit_now
        def exit_after_a_copy_lands(code):
            os.kill(os.getpid(), signal.SIGINT)  # Python runs its handler at the next bytecode: inside this one
            sum(range(1000))
            exit_for_real(code)
        stop_module._exit_now = exit_after_a_copy_lands
        {install}
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    wait_for(process, "ready")
    process.send_signal(signal.SIGINT)
    _, stderr = finish(process)
    assert process.returncode == 128 + signal.SIGINT and stderr_lines(stderr) == [line], stderr


@pytest.mark.parametrize("tool", ["evaluate", "plot", "results"])
def test_each_tool_takes_signals_before_its_libraries_load(tool):
    with open(os.path.join(REPO, "cleanrl_utils", f"{tool}.py")) as file:
        source = file.read()
    guard = source.index(f'    exit_tool_on_signals("cleanrl_utils.{tool}")')
    assert guard < source.index("\nimport numpy as np") and guard < source.index("\nimport os")


def test_a_training_run_whose_stdout_reader_goes_trains_on_and_saves(tmp_path):
    """Trial 12, P5: `python cleanrl/ppo.py | head -2` died in a BrokenPipeError at its next progress line, exit 1,
    no checkpoint. The reader here is gone before the run writes its first line."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    command = [sys.executable, "cleanrl/ppo.py", "--total-timesteps", "2048", "--torch-threads", "1"]
    result = subprocess.run(
        [*command, "--log-dir", str(tmp_path)], stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    os.close(write_end)
    assert result.returncode == 0 and "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
    (run_dir,) = os.listdir(tmp_path)
    assert os.path.exists(tmp_path / run_dir / "checkpoint.pt")


def test_under_a_memory_limit_numpys_blas_gets_one_thread_unless_set():
    """Trial 16, T1: OpenBLAS's per-thread buffers did not fit under `ulimit -v 400000` (its own line, exit 1) or
    retried in C for minutes, deaf to signals; under a limit the tools and scripts give it one thread."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, resource.RLIM_INFINITY))

    code = "import os; from cleanrl_utils.stop import exit_tool_on_signals; exit_tool_on_signals('x'); "
    code += "print(os.environ.get('OPENBLAS_NUM_THREADS'))"
    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}
    run = lambda **kw: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, **kw)  # noqa: E731
    assert run(env=env, preexec_fn=limit).stdout.strip() == "1"
    assert run(env=env).stdout.strip() == "None"  # no limit: numpy's default
    assert run(env={**env, "OPENBLAS_NUM_THREADS": "2"}, preexec_fn=limit).stdout.strip() == "2"  # the user's own


@pytest.mark.parametrize("limit_kib", [180_000, 200_000, 220_000, 300_000])
def test_results_under_a_tight_memory_limit_writes_or_says_so_in_one_line(tmp_path, limit_kib):
    """Trial 17, U1: `ulimit -v 200000` gave two Pillow tracebacks ("codec configuration error": zlib refused memory)
    and an output folder holding tables.md alone; 180000 OpenBLAS's own line; 220000 a half-made folder the line did
    not mention. Whichever happens on this machine: every file, or one line, the docs page untouched, and no folder
    left unless the line names what it holds."""
    import resource
    import shutil

    shutil.copytree(os.path.join(REPO, "benchmark", "results"), tmp_path / "results")
    shutil.copy(os.path.join(REPO, "docs", "ppo.md"), tmp_path / "ppo.md")
    page = (tmp_path / "ppo.md").read_text()

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_kib * 1024, resource.RLIM_INFINITY))

    out = tmp_path / "made" / "out"  # its parent is made too, and must go with it
    command = [sys.executable, "-m", "cleanrl_utils.results", "--results-dir", str(tmp_path / "results")]
    command += ["--output-dir", str(out), "--docs", str(tmp_path / "ppo.md")]
    env = {key: value for key, value in os.environ.items() if key not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, preexec_fn=limit, env=env, timeout=120)
    if result.returncode == 0:
        assert (out / "tables.md").exists() and list(out.glob("*.png")), result.stdout
    else:
        assert stderr_lines(result.stderr)[-1:] == stderr_lines(result.stderr), result.stderr
        assert result.stderr.startswith("error: the machine refused memory or threads (ulimit -v: "), result.stderr
        assert (tmp_path / "ppo.md").read_text() == page
        if "holds the tables and figures written so far" not in result.stderr:
            assert not (tmp_path / "made").exists(), os.listdir(tmp_path / "made")


@pytest.mark.parametrize("limited", [True, False])
def test_pillows_codec_error_is_the_machine_refusing_memory_only_under_a_limit(limited):
    """zlib's deflateInit2 failing under `ulimit -v` reaches the user as Pillow's "codec configuration error": one
    line naming the limit there; with no limit the same words are not a memory problem, and keep their traceback."""
    code = """
        import resource, sys
        if sys.argv[1] == "True":
            resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, resource.RLIM_INFINITY))
        from cleanrl_utils.stop import exit_tool_on_signals
        exit_tool_on_signals("cleanrl_utils.some_tool")
        try:
            raise AttributeError("'_idat' object has no attribute 'fileno'")
        except AttributeError as exc:
            raise OSError("codec configuration error when writing image file") from exc
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(limited)], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 1
    if limited:
        assert stderr_lines(result.stderr) == [
            "error: the machine refused memory or threads (ulimit -v: 8,192 MiB; OSError: codec configuration error "
            "when writing image file): retry with more memory (ulimit -v, a container's limit), smaller settings, or "
            "fewer runs at once"
        ]
    else:
        assert "Traceback" in result.stderr


@pytest.mark.parametrize("limit_kib", [200_000, 220_000, 280_000, 300_000, 320_000, 400_000])
def test_plot_under_a_tight_memory_limit_plots_or_says_so_in_one_line(tmp_path, limit_kib):
    """Trial 16, T1: `ulimit -v 400000` gave OpenBLAS's line and an empty output folder; 300000 a MemoryError
    traceback. Then 320000: OpenBLAS's C exit(1) mid-plot, an empty folder left; 280000: scipy's OpenBLAS retrying its
    buffer forever as it loaded. Whichever happens on this machine: the plot, or one line with nothing written, never
    a traceback, another library's line or a hang."""
    import resource

    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "runs" / "CartPole-v1__ppo__1__1"))
    for step in range(1, 6):
        writer.add_scalar("charts/episodic_return", float(step), step * 100)
    writer.close()

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_kib * 1024, resource.RLIM_INFINITY))

    out = tmp_path / "out"
    command = [sys.executable, "-m", "cleanrl_utils.plot", "--log-dir", str(tmp_path / "runs"), "--output-dir", str(out)]
    command += ["--include-unfinished"]
    env = {key: value for key, value in os.environ.items() if key not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, preexec_fn=limit, env=env, timeout=60)
    if result.returncode == 0:
        assert (out / "summary.md").exists()
    else:
        assert stderr_lines(result.stderr)[-1:] == stderr_lines(result.stderr), result.stderr
        assert result.stderr.startswith("error: the machine refused memory or threads (ulimit -v: "), result.stderr
        assert not out.exists() or (os.listdir(out) and "holds the plots drawn so far" in result.stderr)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a file every write to fails with ENOSPC")
@pytest.mark.parametrize("tool", ["plot", "results"])
def test_a_tool_on_a_full_disk_says_so_in_one_line(tmp_path, tool):
    """Trial 19, W2: results and plot on a full disk ended in two chained tracebacks (Pillow's, then OSError ENOSPC).
    Trial 21, Y1: results left tables.md empty or cut mid-row. An output file is written whole as `<name>.tmp`, then
    renamed: that .tmp is linked to /dev/full, where every write fails as on a full disk, and the file of an earlier
    run stays as it was."""
    import shutil

    from torch.utils.tensorboard import SummaryWriter

    out = tmp_path / "out"
    out.mkdir()
    if tool == "plot":
        writer = SummaryWriter(str(tmp_path / "runs" / "CartPole-v1__ppo__1__1"))
        for step in range(1, 6):
            writer.add_scalar("charts/episodic_return", float(step), step * 100)
        writer.close()
        name = "CartPole-v1.png"
        command = ["-m", "cleanrl_utils.plot", "--log-dir", str(tmp_path / "runs"), "--include-unfinished"]
        holds = "holds the plots drawn so far"
    else:
        shutil.copytree(os.path.join(REPO, "benchmark", "results"), tmp_path / "results")
        name = "tables.md"
        command = ["-m", "cleanrl_utils.results", "--results-dir", str(tmp_path / "results")]
        holds = "holds the tables and figures written so far"
    (out / name).write_text("an earlier run's")
    os.symlink("/dev/full", out / f"{name}.tmp")
    result = subprocess.run(
        [sys.executable, *command, "--output-dir", str(out)], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert stderr_lines(result.stderr)[-1:] == stderr_lines(result.stderr), result.stderr
    assert result.stderr.startswith("error: the disk is full (No space left on device"), result.stderr
    assert f"{out} {holds}" in result.stderr and result.stderr.endswith("write elsewhere, and run again\n")
    assert (out / name).read_text() == "an earlier run's" and not os.path.lexists(out / f"{name}.tmp")


def test_a_closed_terminal_stops_training_with_a_checkpoint(tmp_path):
    """Trial 19, W7: closing the terminal (or a dropped ssh session) sends SIGHUP, which killed the run at once: no
    checkpoint, every step lost, and each env worker printed two tracebacks. Now SIGHUP stops a run as SIGTERM does,
    and the writes to the terminal that is gone (EIO) do not stop it. Real ppo.py on Gymnasium's async vector env, its
    output on a pseudo-terminal whose other end is closed before the signal."""
    import pty

    import torch

    master, slave = pty.openpty()
    command = [sys.executable, os.path.join(REPO, "cleanrl", "ppo.py"), "--total-timesteps", "2000000"]
    command += ["--num-envs", "2", "--num-steps", "64", "--vector-mode", "async", "--torch-threads", "1"]
    process = subprocess.Popen(
        command + ["--log-dir", str(tmp_path / "runs")], stdin=slave, stdout=slave, stderr=slave, cwd=REPO
    )
    os.close(slave)
    seen, deadline = b"", time.time() + 120
    while b"step " not in seen and time.time() < deadline:  # training has begun: a progress line
        try:
            seen += os.read(master, 4096)
        except OSError:
            break
    assert b"step " in seen, seen.decode(errors="replace")
    os.close(master)  # the terminal goes; writes to it now fail with EIO
    process.send_signal(signal.SIGHUP)
    assert process.wait(timeout=120) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert checkpoint["global_step"] > 0 and checkpoint["global_step"] % 128 == 0


@pytest.mark.parametrize("change", ["moved", "deleted"])
def test_a_run_folder_moved_or_deleted_while_training_is_one_line(tmp_path, change):
    """Trial 20, X1: `mv` or `rm -rf` of a training run's folder gave two FileNotFoundError tracebacks (the tensorboard
    writer's thread, then the training loop's next add_scalar), and nothing said where the last checkpoint went. Real
    ppo.py: the moved run checkpoints every iteration (the save is what fails first, or the tensorboard write), and its
    line names the checkpoint in the new place; the deleted one has no checkpoint (the tensorboard write fails)."""
    command = [sys.executable, os.path.join(REPO, "cleanrl", "ppo.py"), "--total-timesteps", "2000000"]
    command += ["--num-envs", "2", "--num-steps", "64", "--torch-threads", "1", "--log-dir", str(tmp_path / "runs")]
    command += ["--checkpoint-every", "1" if change == "moved" else "100000"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    wait_for(process, "step ")  # training has begun
    (run_dir,) = (tmp_path / "runs").iterdir()
    if change == "moved":
        run_dir.rename(tmp_path / "kept")
    else:
        import shutil

        shutil.rmtree(run_dir)
    stdout, stderr = finish(process)
    assert process.returncode == 1 and "Traceback" not in stderr, stderr
    if change == "moved":
        checkpoint = tmp_path / "kept" / "checkpoint.pt"
        assert stderr_lines(stderr) == [
            f"error: the run folder {run_dir} was moved to {tmp_path / 'kept'} while the run trained, so this run "
            f"cannot write on; its last checkpoint is {checkpoint} (continue with --resume {checkpoint})"
        ]
        assert checkpoint.is_file()
    else:
        assert stderr_lines(stderr) == [
            f"error: the run folder {run_dir} was deleted while the run trained, with everything in it; this run "
            "cannot write on: start it again"
        ]


LATE_STOP = """
    import sys, time
    from cleanrl_utils.checkpoint import write_atomically
    from cleanrl_utils.run import record_end_step
    from cleanrl_utils.stop import StopAfterIteration, stopped_line

    class Writer:
        def add_scalar(self, tag, value, step):
            pass

    stop = StopAfterIteration()
    stopping = stop.requested  # the last iteration's one look at the flag, before the signal
    print("ready", flush=True)
    while not stop.requested:
        time.sleep(0.01)
    write_atomically(sys.argv[1], lambda file: file.write(b"the last iteration's checkpoint"))
    if sys.argv[2] == "honoured":
        print(stopped_line(7, sys.argv[1]), flush=True)
    record_end_step(Writer(), 700)
    print("done", flush=True)
"""


@pytest.mark.parametrize("stop", ["late", "honoured"])
def test_a_stop_in_the_last_iteration_says_the_run_finished(tmp_path, stop):
    """Trial 20 cosmetic: a Ctrl-C in the last iteration, after the loop's look at its flag, printed "stopping after
    this iteration" and then nothing: the run finished as planned and never said so. A stop the loop honoured has its
    own line and gets no second one."""
    path = tmp_path / "checkpoint.pt"
    process = start(LATE_STOP, str(path), stop)
    wait_for(process, "ready")
    process.send_signal(signal.SIGINT)
    stdout, stderr = finish(process)
    assert process.returncode == 0 and "Traceback" not in stderr, stderr
    late = f"Ctrl-C came too late to stop the run early: it trained all its iterations and finished as planned; checkpoint: {path}"
    if stop == "late":
        assert stdout.splitlines() == [late, "done"]
    else:
        assert stdout.splitlines() == [stopped_line(7, str(path)), "done"]


EVENTS_ON_A_FULL_DISK = """
    import glob, os, sys, time
    from cleanrl_utils.stop import exit_at_once_on_signals
    exit_at_once_on_signals()
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(sys.argv[1])
    writer.add_scalar("charts/SPS", 1.0, 1)
    writer.flush()
    (events,) = glob.glob(os.path.join(sys.argv[1], "events*"))
    os.remove(events)
    os.symlink("/dev/full", events)  # every write to the events file now fails as on a full disk
    for step in range(2, 200):
        writer.add_scalar("charts/SPS", 1.0, step)
        time.sleep(0.05)
    print("never failed", flush=True)
"""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a file every write to fails with ENOSPC")
def test_a_full_disk_under_the_tensorboard_writer_is_one_line(tmp_path):
    """Trial 21, Y5: a full disk while tensorboard wrote its events printed the writer thread's 20-line traceback
    above the disk-full line. The thread now says nothing; the loop's next write raises, and that is the one line."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(EVENTS_ON_A_FULL_DISK), str(tmp_path / "run")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr and "never failed" not in result.stdout
    (line,) = stderr_lines(result.stderr)
    assert line == "error: the disk is full (No space left on device): free space there, or write elsewhere, and run again"


def test_the_moved_run_folder_line_names_the_video_still_being_filmed(tmp_path):
    """Trial 21, Y6: a run whose folder moved while an evaluation video was filmed ended without a word on it; the
    video's own process (its own session) finishes it in the folder's new place, and the line says so."""
    from cleanrl_utils.run import lock_run_folder
    from cleanrl_utils.stop import RUN_FOLDER_LOCKS, STILL_FILMING, run_folder_gone

    run_dir = tmp_path / "runs" / "CartPole-v1__ppo__1__1"
    (run_dir / "videos" / "iteration-4").mkdir(parents=True)
    (run_dir / "checkpoint.pt").write_bytes(b"saved")
    lock_run_folder(str(run_dir))
    STILL_FILMING[:] = [str(run_dir / "videos" / "iteration-4")]
    try:
        run_dir.rename(tmp_path / "kept")
        kept = tmp_path / "kept"
        assert run_folder_gone() == (
            f"error: the run folder {run_dir} was moved to {kept} while the run trained, so this run cannot write on; "
            f"its last checkpoint is {kept / 'checkpoint.pt'} (continue with --resume {kept / 'checkpoint.pt'}); the "
            f"evaluation video being filmed in {kept / 'videos' / 'iteration-4'} is finished by its own process"
        )
    finally:
        STILL_FILMING.clear()
        os.close(RUN_FOLDER_LOCKS.pop(str(run_dir)))


def test_a_ctrl_c_during_the_last_iteration_says_the_run_finished(tmp_path):
    """Trial 22, Z2: a Ctrl-C during the rollout of the last iteration printed "stopped at iteration 2 ... (continue
    with --resume ...)", a resume that only says the run already ran its iterations. Real ppo.py, two iterations of
    8,192 steps; the signal once the first iteration's checkpoint is written."""
    command = [sys.executable, os.path.join(REPO, "cleanrl", "ppo.py"), "--num-envs", "1", "--num-steps", "8192"]
    command += ["--total-timesteps", "16384", "--checkpoint-every", "1", "--torch-threads", "1"]
    process = subprocess.Popen(
        command + ["--log-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    wait_for(process, "run folder: ")
    (run_dir,) = tmp_path.iterdir()
    deadline = time.time() + 120
    while not (run_dir / "checkpoint.pt").exists() and time.time() < deadline:  # iteration 1 is done
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    stdout, stderr = finish(process)
    assert process.returncode == 0 and "Traceback" not in stderr, stderr
    assert "stopped at iteration" not in stdout, stdout
    assert (
        "Ctrl-C came too late to stop the run early: it trained all its iterations and finished as planned; "
        f"checkpoint: {run_dir / 'checkpoint.pt'}"
    ) in stdout
