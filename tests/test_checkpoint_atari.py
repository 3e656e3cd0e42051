"""Checkpoint, resume, Ctrl-C and divergence handling of cleanrl/ppo_atari_envpool.py, with real
runs (a subprocess sent SIGINT, a corrupted checkpoint, a forced divergence)."""

import hashlib
import os
import random
import shutil

import numpy as np
import pytest
import torch
from helpers import only_run_dir, read_scalars, run_interrupted, run_script

from cleanrl.ppo_atari_envpool import Agent, Args, ppo_loss
from cleanrl_utils.checkpoint import load_torch, save_torch, set_torch_rng_states, torch_rng_states

SCRIPT = "ppo_atari_envpool"
# 16 iterations of 8 envs x 32 steps: fast, and long enough to interrupt in the middle
SMALL = ["--env-id", "Pong-v5", "--total-timesteps", "4096", "--num-steps", "32", "--max-episode-steps", "60"]
SMALL += ["--update-epochs", "1"]  # the update is most of a run's time; these tests count iterations and files


def test_checkpoint_round_trip_is_bit_exact(tmp_path):
    torch.manual_seed(0)
    agent = Agent(6)
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    obs = torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8)
    valid = torch.ones(16, dtype=torch.bool)
    for _ in range(3):  # real steps, so Adam's moments are not zeros
        loss, _ = ppo_loss(
            agent,
            obs,
            torch.randint(0, 6, (16,)),
            torch.randn(16),
            torch.randn(16),
            torch.randn(16),
            torch.randn(16),
            valid,
            Args(),
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    random.seed(3)
    np.random.seed(4)
    path = str(tmp_path / "checkpoint.pt")
    state = {
        "script": SCRIPT,
        "run_name": "run",
        "args": {},
        "iteration": 3,
        "global_step": 768,
        "model_state_dict": agent.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "rng": torch_rng_states(),
    }
    save_torch(path, state)
    assert not os.path.exists(path + ".tmp")
    expected_draws = (random.random(), np.random.rand(), torch.rand(3))

    restored = load_torch(path, SCRIPT, {"model_state_dict": dict, "optimizer_state_dict": dict})
    agent2 = Agent(6)
    optimizer2 = torch.optim.Adam(agent2.parameters(), lr=1.0)
    agent2.load_state_dict(restored["model_state_dict"])
    optimizer2.load_state_dict(restored["optimizer_state_dict"])
    set_torch_rng_states(restored["rng"])
    for (name, p), p2 in zip(agent.state_dict().items(), agent2.state_dict().values()):
        assert torch.equal(p, p2), name
    saved_opt, restored_opt = optimizer.state_dict(), optimizer2.state_dict()
    assert saved_opt["param_groups"] == restored_opt["param_groups"]
    for key in saved_opt["state"]:
        for name, value in saved_opt["state"][key].items():
            assert torch.equal(value, restored_opt["state"][key][name]), (key, name)
    draws = (random.random(), np.random.rand(), torch.rand(3))
    assert draws[0] == expected_draws[0] and draws[1] == expected_draws[1] and torch.equal(draws[2], expected_draws[2])


@pytest.fixture(scope="module")
def interrupted_run(tmp_path_factory):
    """A run sent SIGINT after its first progress line."""
    log_dir = tmp_path_factory.mktemp("interrupted")
    return run_interrupted(SCRIPT, SMALL, log_dir)


def test_sigint_writes_a_checkpoint_and_exits_zero(interrupted_run):
    returncode, stdout, stderr, run_dir = interrupted_run
    assert returncode == 0, stderr[-2000:]
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    assert f"checkpoint: {checkpoint_path}" in stdout
    assert "Traceback" not in stderr
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    assert 1 <= checkpoint["iteration"] < 16
    assert checkpoint["global_step"] == checkpoint["iteration"] * 256


def test_resume_continues_step_counter_and_lr_schedule(interrupted_run):
    _, _, _, run_dir = interrupted_run
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    stopped_at = torch.load(checkpoint_path, weights_only=True)["iteration"]
    result = run_script(SCRIPT, "--resume", checkpoint_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"resumed {os.path.basename(run_dir)} at iteration {stopped_at}" in result.stdout
    scalars = read_scalars(run_dir)
    lr_steps = [step for step, _ in scalars["charts/learning_rate"]]
    assert lr_steps == [256 * i for i in range(1, 17)]  # one point per iteration, none twice
    for step, lr in scalars["charts/learning_rate"]:
        iteration = step // 256
        assert lr == pytest.approx(2.5e-4 * (1 - (iteration - 1) / 16), rel=1e-5)
    final = torch.load(checkpoint_path, weights_only=True)
    assert final["iteration"] == 16 and final["global_step"] == 4096


def test_divergence_stops_and_keeps_the_last_good_checkpoint(interrupted_run, tmp_path):
    """Resume a good checkpoint with an absurd --learning-rate (a flag a resumed run may change): the
    next iteration overflows the weights. The run must stop naming the iteration, exit non-zero, and
    leave the good checkpoint in its run folder untouched."""
    _, _, _, run_dir = interrupted_run
    good_dir = tmp_path / "good"
    shutil.copytree(run_dir, good_dir)
    good_path = str(good_dir / "checkpoint.pt")
    good = torch.load(good_path, weights_only=True)
    good["iteration"], good["global_step"] = 2, 512  # resume early so the run is not already over
    save_torch(good_path, good)
    digest = hashlib.sha256(open(good_path, "rb").read()).hexdigest()

    result = run_script(SCRIPT, "--resume", good_path, "--learning-rate", "1e30")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert (
        f"non-finite loss or parameters at iteration 3 (global step 768); last good checkpoint: {good_path}" in result.stderr
    )
    assert hashlib.sha256(open(good_path, "rb").read()).hexdigest() == digest


def test_divergence_without_checkpoint_says_so(tmp_path):
    result = run_script(SCRIPT, *SMALL, "--learning-rate", "1e30", "--log-dir", str(tmp_path))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "non-finite loss or parameters at iteration 1 (global step 256); no checkpoint was written" in result.stderr
    assert not os.path.exists(os.path.join(only_run_dir(tmp_path), "checkpoint.pt"))


def test_bad_resume_files_give_one_clear_line(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00not a checkpoint")
    other = tmp_path / "other.pt"
    torch.save({"script": "ppo", "optimizer_state_dict": {}}, other)
    for path, fragment in [
        (tmp_path / "missing.pt", "does not exist"),
        (junk, "is not a readable checkpoint"),
        (other, "is a checkpoint of 'ppo', not of 'ppo_atari_envpool'"),
    ]:
        result = run_script(SCRIPT, "--resume", str(path), timeout=120)
        assert result.returncode != 0 and "Traceback" not in result.stderr
        lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and fragment in lines[0] and str(path) in lines[0], result.stderr
