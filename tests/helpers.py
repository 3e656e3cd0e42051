"""Small helpers shared by the tests: run a script for real, read its tensorboard scalars."""

import glob
import os
import signal
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(script: str, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `cleanrl/<script>.py` in a subprocess with the current interpreter."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, os.path.join(REPO, "cleanrl", f"{script}.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=REPO,
    )


def run_interrupted(script: str, args: list[str], log_dir, process_group: bool = False):
    """Start a run, send SIGINT once its first progress line is out. With process_group, the signal
    goes to the whole process group, as Ctrl-C in a terminal does (env subprocesses included)."""
    process = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "cleanrl", f"{script}.py"), *args, "--log-dir", str(log_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=process_group,
    )
    first_line = process.stdout.readline()
    assert first_line.startswith("step "), first_line + process.stderr.read()
    if process_group:
        os.killpg(process.pid, signal.SIGINT)
    else:
        process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    return process.returncode, first_line + stdout, stderr, only_run_dir(log_dir)


def only_run_dir(log_dir) -> str:
    """The single run folder a script wrote under --log-dir."""
    runs = [d for d in glob.glob(os.path.join(str(log_dir), "*")) if os.path.isdir(d)]
    assert len(runs) == 1, runs
    return runs[0]


def read_scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """All scalars of a run's event files: tag -> [(step, value), ...] in write order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


ATARI_TAGS = {
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "charts/learning_rate",
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/old_approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
}
