"""What a new user's adversarial trial broke (signals, resume from elsewhere, flags on resume, damaged
checkpoints, bad paths), each reproduced with real processes and real signals on the Atari script."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO, read_scalars, wait_for_progress

SCRIPT = os.path.join(REPO, "cleanrl", "ppo_atari_envpool.py")
# 8 envs x 32 steps per iteration; a total no machine finishes in a test, so a signal always lands mid-run
ENDLESS = ["--env-id", "Pong-v5", "--num-steps", "32", "--max-episode-steps", "60", "--total-timesteps", "100000000"]


def start(args: list[str], cwd: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd
    )


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def terminated_run(tmp_path_factory):
    """A run started in folder A with a relative --log-dir, stopped by SIGTERM (what SLURM, docker
    stop and Kubernetes send) once training is under way."""
    folder_a = tmp_path_factory.mktemp("A")
    process = start([*ENDLESS, "--log-dir", "runs"], cwd=str(folder_a))
    head = wait_for_progress(process)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=300)
    (run_dir,) = (folder_a / "runs").iterdir()
    return process.returncode, head + stdout, stderr, str(run_dir)


def test_sigterm_checkpoints_and_exits_zero(terminated_run):
    returncode, stdout, stderr, run_dir = terminated_run
    assert returncode == 0, stderr[-2000:]
    assert "Traceback" not in stderr and "SIGTERM: stopping after this iteration" in stderr
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    assert f"run folder: {run_dir}" in stdout  # absolute, though --log-dir was relative
    assert f"checkpoint: {checkpoint_path} (continue with --resume {checkpoint_path})" in stdout
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    assert checkpoint["iteration"] >= 1 and checkpoint["global_step"] == checkpoint["iteration"] * 256


@pytest.fixture(scope="module")
def resumed_elsewhere(terminated_run, tmp_path_factory):
    """Resumed from folder B, with flags a resumed run may change: a shorter total (the run ends two
    iterations later), a rescue learning rate, and --save-model."""
    _, _, _, run_dir = terminated_run
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    saved = torch.load(checkpoint_path, weights_only=True)
    total = (saved["iteration"] + 2) * 256
    folder_b = tmp_path_factory.mktemp("B")
    args = ["--resume", checkpoint_path, "--total-timesteps", str(total), "--learning-rate", "1e-3", "--save-model"]
    result = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, cwd=str(folder_b), timeout=600)
    return result, saved, total, folder_b


def test_resume_from_another_folder_continues_in_the_run_folder(terminated_run, resumed_elsewhere):
    _, _, _, run_dir = terminated_run
    result, saved, total, folder_b = resumed_elsewhere
    assert result.returncode == 0, result.stderr[-2000:]
    assert os.listdir(folder_b) == []  # nothing written where the command was started
    final = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    assert final["iteration"] == saved["iteration"] + 2 and final["global_step"] == total
    assert os.path.exists(os.path.join(run_dir, "ppo_atari_envpool.cleanrl_model"))  # --save-model applied


def test_flags_given_with_resume_are_applied(terminated_run, resumed_elsewhere):
    _, _, _, run_dir = terminated_run
    result, saved, total, _ = resumed_elsewhere
    final = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    assert final["args"]["total_timesteps"] == total and final["args"]["learning_rate"] == 1e-3
    assert final["args"]["save_model"] and final["args"]["num_envs"] == saved["args"]["num_envs"]
    # The lr schedule is recomputed for the new length: iteration i of n runs at lr * (1 - (i - 1) / n).
    iterations = total // 256
    lrs = {step // 256: lr for step, lr in read_scalars(run_dir)["charts/learning_rate"]}
    for i in (saved["iteration"] + 1, saved["iteration"] + 2):
        assert lrs[i] == pytest.approx(1e-3 * (1 - (i - 1) / iterations), rel=1e-6)


def test_resuming_a_finished_run_says_so(terminated_run, resumed_elsewhere):
    _, _, _, run_dir = terminated_run
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    result = subprocess.run([sys.executable, SCRIPT, "--resume", checkpoint_path], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "already ran its" in result.stdout and "a larger --total-timesteps extends it" in result.stdout


def test_a_flag_that_defines_the_run_cannot_change_on_resume(terminated_run):
    _, _, _, run_dir = terminated_run
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    before = sorted(os.listdir(run_dir))
    for flag, value in (("--num-envs", "4"), ("--gamma", "0.9"), ("--no-uint8-obs", None), ("--log-dir", "/tmp/elsewhere")):
        args = ["--resume", checkpoint_path, flag] + ([value] if value else [])
        result = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=300)
        assert result.returncode != 0 and "Traceback" not in result.stderr
        (line,) = error_lines(result.stderr)
        assert flag.replace("--no-", "--") in line and "cannot change on --resume" in line, line
    assert sorted(os.listdir(run_dir)) == before


@pytest.mark.parametrize("missing", ["iteration", "args", "run_name", "global_step", "rng", "model_state_dict"])
def test_a_checkpoint_missing_a_key_gives_one_line_and_touches_nothing(terminated_run, tmp_path, missing):
    _, _, _, run_dir = terminated_run
    saved = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    damaged = tmp_path / "checkpoint.pt"
    torch.save({key: value for key, value in saved.items() if key != missing}, damaged)
    result = subprocess.run([sys.executable, SCRIPT, "--resume", str(damaged)], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    (line,) = error_lines(result.stderr)
    assert repr(missing) in line and str(damaged) in line, line
    assert os.listdir(tmp_path) == ["checkpoint.pt"]  # no events file, no new checkpoint


def test_weights_that_do_not_fit_give_one_line_and_touch_nothing(terminated_run, tmp_path):
    _, _, _, run_dir = terminated_run
    saved = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    saved["model_state_dict"]["critic.weight"] = torch.zeros(3, 3)
    damaged = tmp_path / "checkpoint.pt"
    torch.save(saved, damaged)
    result = subprocess.run([sys.executable, SCRIPT, "--resume", str(damaged)], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    (line,) = error_lines(result.stderr)
    assert "weights that this script cannot restore" in line and "critic.weight" in line, line
    assert os.listdir(tmp_path) == ["checkpoint.pt"]


def test_ctrl_c_during_start_up_always_stops_with_one_line(tmp_path):
    """Ctrl-C while the libraries load, while EnvPool and the network are set up: the process ends
    promptly with one line, never "Exception ignored" (a KeyboardInterrupt raised inside JAX's GC
    callback is swallowed there and the run would carry on), never a traceback, never training."""
    for delay in (0.2, 0.7, 1.2, 1.7, 2.2, 2.7, 3.2):
        process = start([*ENDLESS, "--log-dir", str(tmp_path / str(delay))], cwd=REPO)
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
        if "step " in stdout:  # training had begun: then it is the checkpoint-and-exit-0 path
            assert process.returncode == 0 and "Ctrl-C: stopping after this iteration" in stderr, (delay, stderr)
            continue
        assert process.returncode == 128 + signal.SIGINT, (delay, process.returncode, stderr)
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("Ctrl-C during start-up: exiting before training began"), stderr
        # once its run folder was made, the line says it removed it (trial 15, S5): no empty folder is left either way
        assert lines[0] == "Ctrl-C during start-up: exiting before training began" or "removed its run folder" in lines[0]
        assert not os.path.exists(tmp_path / str(delay)) or os.listdir(tmp_path / str(delay)) == []


# Bad values of the Atari script (seed range, wrong family, rollout shape, memory): test_ppo_atari_envpool.py's
# BAD_INPUT.


def test_a_log_dir_that_cannot_hold_runs_gives_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = subprocess.run(
        [sys.executable, SCRIPT, "--env-id", "Pong-v5", "--log-dir", str(blocker / "runs")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    (line,) = error_lines(result.stderr)
    assert "--log-dir" in line and "NotADirectoryError" in line, line


def test_runtime_fields_are_not_flags():
    result = subprocess.run([sys.executable, SCRIPT, "--batch-size", "5"], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "--batch-size" in result.stderr and "Traceback" not in result.stderr


def test_a_checkpoint_written_before_the_helpers_still_resumes(tmp_path):
    """tests/data holds a checkpoint written by ppo.py before the run infrastructure moved into
    cleanrl_utils (commit 5771742: `--total-timesteps 2048 --num-envs 4 --num-steps 64
    --max-episode-steps 30 --seed 3`, finished at iteration 8). Its args still carry the runtime
    fields (batch_size, ...) that are no longer flags. It resumes, extended by four iterations, with
    its saved envs, and finishes."""
    run_dir = tmp_path / "CartPole-v1__ppo__3__1795341026"
    run_dir.mkdir()
    checkpoint_path = run_dir / "checkpoint.pt"
    checkpoint_path.write_bytes((Path(__file__).parent / "data" / "ppo_checkpoint_before_thin_template.pt").read_bytes())
    old = torch.load(checkpoint_path, weights_only=True)
    assert old["iteration"] == 8 and old["args"]["batch_size"] == 256 and old["env_state"] is not None
    script = os.path.join(REPO, "cleanrl", "ppo.py")
    result = subprocess.run(
        [sys.executable, script, "--resume", str(checkpoint_path), "--total-timesteps", "3072"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"resumed {run_dir.name} at iteration 8 (global step 2,048)" in result.stdout
    new = torch.load(checkpoint_path, weights_only=True)
    assert new["iteration"] == 12 and new["global_step"] == 3072
    changed = ("total_timesteps", "num_iterations", "resume")
    assert {k: v for k, v in new["args"].items() if k in old["args"] and k not in changed} == {
        k: v for k, v in old["args"].items() if k not in changed
    }
    # flags added since (--keep-checkpoints) take their defaults
    assert {k: v for k, v in new["args"].items() if k not in old["args"]} == {"keep_checkpoints": False}
    steps = [step for step, _ in read_scalars(str(run_dir))["charts/learning_rate"]]
    assert steps == [256 * i for i in range(9, 13)]
