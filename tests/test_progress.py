"""The training progress line: one live line rewritten in place on a terminal, plain lines otherwise."""

import pytest
from helpers import only_run_dir, run_in_terminal, run_script

# ~20k CartPole steps take several seconds, so a live line (every second) is rewritten several times.
ARGS = ["--env-id", "CartPole-v1", "--total-timesteps", "20480"]


@pytest.mark.parametrize("script", ["ppo", "ppo_continuous_action"])
def test_terminal_gets_one_live_line(tmp_path, script):
    args = ARGS if script == "ppo" else ["--env-id", "Hopper-v4", "--total-timesteps", "16384", "--num-envs", "8"]
    returncode, output, stderr = run_in_terminal(script, *args, "--log-dir", str(tmp_path))
    assert returncode == 0, stderr[-2000:]
    progress = [line for line in output.split("\n") if "step " in line]
    # every progress update rewrote the same line: one line on screen, several updates in it
    assert len(progress) == 1, progress
    updates = progress[0].split("\r\x1b[K")
    assert updates[0] == "" and len(updates) >= 3, updates
    assert all(update.startswith("step ") for update in updates[1:])
    total = args[args.index("--total-timesteps") + 1]
    assert updates[-1].startswith(f"step {int(total):,}/{int(total):,}")  # the final state, then a newline
    assert output.endswith("\n")


def test_pipe_gets_plain_lines(tmp_path):
    result = run_script("ppo", *ARGS, "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\r" not in result.stdout and "\x1b" not in result.stdout
    threads, run_folder, *lines = result.stdout.splitlines()
    assert threads == "torch threads: 1 (--torch-threads 1)"  # the speed levers first (ppo.py has no precision flag)
    assert run_folder == f"run folder: {only_run_dir(tmp_path)}"  # then which folder the run writes to
    assert lines and all(line.startswith("step ") for line in lines)
    assert lines[-1].startswith("step 20,480/20,480")


def test_a_resumed_run_counts_the_episodes_since_its_resume(tmp_path):
    """Trial 21 cosmetic: ppo.py (sync envs) resumed with its episodes' returns restored said "episodes since resume
    391" where 387 came before the stop. Real ppo.py: 4,096 steps, then resumed to 8,192."""
    import re

    first = run_script("ppo", *ARGS[:2], "--total-timesteps", "4096", "--log-dir", str(tmp_path))
    assert first.returncode == 0, first.stderr[-2000:]
    before = int(re.findall(r"episodes ([\d,]+)", first.stdout)[-1].replace(",", ""))
    checkpoint = f"{only_run_dir(tmp_path)}/checkpoint.pt"
    resumed = run_script("ppo", "--resume", checkpoint, "--total-timesteps", "8192")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    since = int(re.findall(r"episodes since resume ([\d,]+)", resumed.stdout)[-1].replace(",", ""))
    assert before > 20 and 0 < since < before + 10  # about as many as in the first 4,096 steps, not their sum
