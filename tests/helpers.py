"""Small helpers shared by the tests: run a script for real, read its tensorboard scalars."""

import atexit
import glob
import json
import os
import pty
import select
import signal
import subprocess
import sys
import tempfile
import time
import tty

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(script: str, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `cleanrl/<script>.py` as `python <script> <args>` with the current interpreter, in REPO: its exit code, and
    its stdout and stderr as text."""
    return run_python([os.path.join(REPO, "cleanrl", f"{script}.py"), *args], env=env, timeout=timeout)


# Environment variables that only a run reads, as it runs (pytest sets PYTEST_CURRENT_TEST anew for each test): a run
# whose environment differs from the worker's in these alone still forks the warm interpreter
RUN_TIME_VARIABLES = {"MARKED_FRAMES_LAG", "PYTEST_CURRENT_TEST"}


def run_python(args: list[str], env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python *args` (a script and its arguments, `-m module ...` or `-c code ...`) in REPO, as subprocess.run with
    capture_output and text gives it. A run in the worker's own environment (give or take RUN_TIME_VARIABLES) is a
    fork of the worker's warm interpreter (tests/forked_runs.py: the imports paid once); any other is a fresh process."""
    full_env = {**os.environ, **(env or {})}
    if all(full_env.get(key) == os.environ.get(key) for key in set(full_env) - RUN_TIME_VARIABLES):
        return forked_run([sys.executable, *args], timeout, full_env)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO)


# The pytest worker's warm interpreter (tests/forked_runs.py), and the environment it was started in, less the
# RUN_TIME_VARIABLES: one the modules it imported may have read. It is started again when that environment changes.
WARM_INTERPRETER = {"process": None, "env": None}


def warm_interpreter() -> subprocess.Popen:
    process = WARM_INTERPRETER["process"]
    env = {key: value for key, value in os.environ.items() if key not in RUN_TIME_VARIABLES}
    if process is None or process.poll() is not None or WARM_INTERPRETER["env"] != env:
        if process is not None:
            end_warm_interpreter(process)
        command = [sys.executable, os.path.join(REPO, "tests", "forked_runs.py")]
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, cwd=REPO, env=env)
        assert "ready" in read_reply(process, timeout=300)
        WARM_INTERPRETER.update(process=process, env=env)
        atexit.register(end_warm_interpreter, process)
    return process


def end_warm_interpreter(process: subprocess.Popen) -> None:
    """At the worker's exit (or when it is replaced): the warm interpreter reads the end of its input and ends; waited
    for, so that it is not left behind and its CPU time counts as the suite's (`time make test`)."""
    if process.stdin.closed:
        return
    process.stdin.close()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()


def read_reply(process: subprocess.Popen, timeout: float) -> dict | None:
    """The warm interpreter's next JSON line, or None if none came within `timeout` seconds. Byte by byte from an
    unbuffered pipe: no reply waits in a Python buffer while select() sees an empty pipe."""
    deadline, line = time.monotonic() + timeout, b""
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return None
        byte = process.stdout.read(1)
        assert byte, "the warm interpreter (tests/forked_runs.py) ended"
        line += byte
    return json.loads(line)


def forked_run(command: list[str], timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """`command` (the interpreter and its arguments) run as a fork of the warm interpreter, in environment `env` (the
    worker's if None; see run_python for which may differ); on `timeout` the run is killed and
    subprocess.TimeoutExpired raised, as subprocess.run does."""
    process = warm_interpreter()
    with tempfile.NamedTemporaryFile() as out, tempfile.NamedTemporaryFile() as err:
        request = {
            "argv": command[1:],
            "env": dict(os.environ) if env is None else env,
            "stdout": out.name,
            "stderr": err.name,
        }
        process.stdin.write(json.dumps(request).encode() + b"\n")
        pid = read_reply(process, timeout=60)["pid"]
        reply = read_reply(process, timeout)
        if reply is None:
            os.kill(pid, signal.SIGKILL)
            read_reply(process, timeout=60)
        # decoded as subprocess.run(text=True) does: the locale's encoding, universal newlines ("\r" -> "\n")
        stdout, stderr = (open(file.name).read() for file in (out, err))
    if reply is None:
        raise subprocess.TimeoutExpired(command, timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(command, reply["returncode"], stdout, stderr)


def run_script_cases(
    script: str, cases: list[list[str]], timeout: float = 600, folder: str = "cleanrl"
) -> list[subprocess.CompletedProcess]:
    """The outcome of `python <folder>/<script>.py *case` for each case (exit code, stdout, stderr), all run in one
    interpreter by tests/script_cases.py: a bad-input test file pays the imports once, not once per case (and that
    interpreter is a fork of the warm one: not even once)."""
    script_path = os.path.join(REPO, folder, f"{script}.py")
    command = [sys.executable, os.path.join(REPO, "tests", "script_cases.py"), script_path, json.dumps(cases)]
    result = forked_run(command, timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes = json.loads(result.stdout.strip().splitlines()[-1])
    return [subprocess.CompletedProcess(case, **outcome) for case, outcome in zip(cases, outcomes)]


def marked_frames_command(script_path: str) -> list[str]:
    """The interpreter command that runs `script_path` as __main__ on marked Atari frames (tests/marked_frames.py);
    the script's own arguments follow it."""
    import marked_frames

    return [
        sys.executable,
        "-c",
        marked_frames.BOOTSTRAP.format(tests=os.path.dirname(os.path.abspath(__file__))),
        script_path,
    ]


def run_on_marked_frames(script: str, *args: str, lag: int = 0, timeout: float = 600) -> subprocess.CompletedProcess:
    """`run_script` on marked Atari frames: the learning task the Atari scripts' learning tests use; `lag` > 0 is
    the memory task (tests/marked_frames.py)."""
    command = [*marked_frames_command(os.path.join(REPO, "cleanrl", f"{script}.py")), *args]
    return run_python(command[1:], env={"MARKED_FRAMES_LAG": str(lag)}, timeout=timeout)


def marked_frame_returns(script: str, *args: str, log_dir, lag: int = 0) -> list[float]:
    """The returns of every game of `script` run on marked Atari frames (`run_on_marked_frames`) with its run
    folder under `log_dir`; the run must exit 0."""
    result = run_on_marked_frames(script, *args, "--log-dir", str(log_dir), lag=lag)
    assert result.returncode == 0, result.stderr[-3000:]
    return [value for _, value in read_scalars(only_run_dir(log_dir))["charts/episodic_return"]]


def assert_masked_rows_change_nothing(loss_fn, module, tensors: list, fresh_rows: list, valid) -> None:
    """`loss_fn(*tensors, valid)` returns (loss, stats) over `module`'s parameters. Overwriting the rows where `valid`
    is False (stale steps) with `fresh_rows` (one tensor of replacement rows per input) changes neither the loss nor
    its gradients nor any statistic; with every row counted, the same overwrite changes the loss (the mask does the
    work)."""
    import pytest
    import torch

    def loss_grads_stats(inputs: list, mask) -> tuple:
        module.zero_grad()
        loss, stats = loss_fn(*inputs, mask)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in module.parameters()], stats

    changed = []
    for tensor, rows in zip(tensors, fresh_rows, strict=True):
        tensor = tensor.clone()
        tensor[~valid] = rows
        changed.append(tensor)
    (base_loss, base_grads, base_stats), (loss, grads, stats) = (loss_grads_stats(x, valid) for x in (tensors, changed))
    torch.testing.assert_close(loss, base_loss, rtol=1e-5, atol=1e-6)
    for grad, base_grad in zip(grads, base_grads):
        torch.testing.assert_close(grad, base_grad, rtol=1e-5, atol=1e-6)
    for key in base_stats:
        torch.testing.assert_close(stats[key], base_stats[key], rtol=1e-5, atol=1e-6)
    everything = torch.ones_like(valid)
    with torch.no_grad():
        assert loss_fn(*changed, everything)[0].item() != pytest.approx(loss_fn(*tensors, everything)[0].item())


def assert_one_error_line(result: subprocess.CompletedProcess, fragments: list[str], ignore_warnings: bool = False) -> None:
    """A user mistake's outcome: non-zero exit, no traceback, and exactly one non-empty stderr line,
    `error: ...`, holding every fragment. ignore_warnings: library warning lines (EnvPool's gym
    logger) do not count."""
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    if ignore_warnings:
        lines = [line for line in lines if "Warn" not in line and "gym.logger" not in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def one_line_exit(call, *fragments: str) -> str:
    """In-process: `call()` exits with one line `error: ...` holding every fragment; returns the line."""
    import pytest

    with pytest.raises(SystemExit) as exit_info:
        call()
    message = exit_info.value.code
    assert isinstance(message, str) and message.startswith("error: ") and "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


def run_in_terminal(script: str, *args: str, timeout: float = 600) -> tuple[int, str, str]:
    """Run `cleanrl/<script>.py` with its stdout on a pseudo-terminal (sys.stdout.isatty() is True,
    as in an interactive shell) and its stderr in a file. Returns (returncode, stdout, stderr)."""
    master, slave = pty.openpty()
    tty.setraw(slave)  # no "\n" -> "\r\n" translation: read back exactly the bytes the script wrote
    with tempfile.TemporaryFile() as stderr_file:
        process = subprocess.Popen(
            [sys.executable, os.path.join(REPO, "cleanrl", f"{script}.py"), *args],
            stdout=slave,
            stderr=stderr_file,
            cwd=REPO,
        )
        os.close(slave)
        chunks, deadline = [], time.time() + timeout
        while True:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.time()))
            if not ready:
                process.kill()
                raise TimeoutError(f"{script} {args} still running after {timeout} s")
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every process holding the terminal has closed it
                break
            if not data:
                break
            chunks.append(data)
        os.close(master)
        returncode = process.wait(timeout=60)
        stderr_file.seek(0)
        stderr = stderr_file.read().decode()
    return returncode, b"".join(chunks).decode(), stderr


def wait_for_progress(process: subprocess.Popen) -> str:
    """Read a run's stdout (a text pipe) up to its first progress line: training is under way. Returns what was read
    ("run folder: ..." comes first); fails with the output if the run ends before it."""
    head = ""
    for line in process.stdout:
        head += line
        if line.startswith("step "):
            return head
    raise AssertionError(head + process.stderr.read())


def run_interrupted(script: str, args: list[str], log_dir, process_group: bool = False, signum: int = signal.SIGINT):
    """Start a run, send SIGINT (or `signum`) once its first progress line is out. With process_group,
    the signal goes to the whole process group, as Ctrl-C in a terminal does (env subprocesses included)."""
    process = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "cleanrl", f"{script}.py"), *args, "--log-dir", str(log_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=process_group,
    )
    head = wait_for_progress(process)
    if process_group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=300)
    return process.returncode, head + stdout, stderr, only_run_dir(log_dir)


def evaluate_cli_returns(model_path: str, *flags: str) -> list[float]:
    """`python -m cleanrl_utils.evaluate --model-path MODEL FLAGS` run from the repository as a user would; the
    per-episode returns it printed (the run must exit 0)."""
    result = run_python(["-m", "cleanrl_utils.evaluate", "--model-path", model_path, *flags], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return [float(line.split("return ")[1]) for line in result.stdout.splitlines() if line.startswith("episode ")]


def decoded_video(path: str):
    """The frames of an MP4, checked to be RGB, more than 5 frames, not blank and moving."""
    import imageio.v3 as iio
    import numpy as np

    frames = iio.imread(path)
    assert frames.ndim == 4 and frames.shape[-1] == 3 and frames.dtype == np.uint8
    assert len(frames) > 5
    assert frames.std() > 10  # not blank
    assert len({frame.tobytes() for frame in frames}) > 1  # it moves
    return frames


def only_run_dir(log_dir) -> str:
    """The single run folder a script wrote under --log-dir."""
    runs = [d for d in glob.glob(os.path.join(str(log_dir), "*")) if os.path.isdir(d)]
    assert len(runs) == 1, runs
    return runs[0]


def folder_state(folder: str) -> dict[str, tuple[int, int]]:
    """Each file of `folder` -> (size, mtime in ns): equal before and after a command that must change nothing."""
    return {entry.name: (entry.stat().st_size, entry.stat().st_mtime_ns) for entry in os.scandir(folder)}


def read_scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """All scalars of a run's event files: tag -> [(step, value), ...] in write order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


# The scalars every actor-critic on-policy script logs; each script's tests add its own.
ON_POLICY_TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/learning_rate"}
ON_POLICY_TAGS |= {"losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/explained_variance"}
ATARI_TAGS = ON_POLICY_TAGS | {"losses/approx_kl", "losses/old_approx_kl", "losses/clipfrac"}


def assert_evaluates_whole_games_of_its_weights(model_path: str, head: str, action: int, tmp_dir: str) -> None:
    """The saved Atari model at `model_path`, its `head` layer ("actor" or "q_head") rewritten to always prefer
    `action`, evaluated greedily for 2 games: the returns must equal a replay by brute force, in the script's own
    env on the same seeds, of that constant action until each env's first game over (all lives, unclipped
    rewards) or time limit. Fails if the evaluator ignored the weights, cut a game at a life loss, summed clipped
    rewards, or mixed envs up."""
    import importlib

    import numpy as np
    import torch

    from cleanrl_utils.evaluate import evaluate

    saved = torch.load(model_path, weights_only=True)
    weights = saved["model_state_dict"]
    weights[f"{head}.weight"].zero_()
    weights[f"{head}.bias"].zero_()
    weights[f"{head}.bias"][action] = 1.0
    constant = os.path.join(tmp_dir, "constant_action.cleanrl_model")
    torch.save(saved, constant)
    returns = evaluate(constant, episodes=2, seed=1, greedy=True, cuda=False)

    train_args = saved["args"]
    envs = importlib.import_module(f"cleanrl.{saved['script']}").make_env(
        train_args["env_id"], 2, 1, train_args["max_episode_steps"]
    )
    envs.reset()
    totals, over = np.zeros(2), np.zeros(2, dtype=bool)
    while not over.all():
        _, _, _, truncated, info = envs.step(np.full(2, action))
        totals += info["reward"] * ~over
        over |= info["terminated"].astype(bool) | truncated
    envs.close()
    assert returns == totals.tolist(), (returns, totals)
