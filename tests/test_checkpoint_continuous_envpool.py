"""Checkpoint, resume, Ctrl-C and divergence handling of cleanrl/ppo_continuous_action_envpool.py,
with real runs (a subprocess sent SIGINT, one killed and resumed, a corrupted checkpoint, a forced
divergence), including the in-script normaliser, reward scaler and value normaliser states."""

import hashlib
import os
import random
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from helpers import REPO, only_run_dir, read_scalars, run_interrupted, run_script

from cleanrl.ppo_continuous_action_envpool import (
    Agent,
    Args,
    RewardScaler,
    RunningMeanStd,
    load_checkpoint,
    ppo_loss,
    rng_states,
    save_checkpoint,
    set_rng_states,
)

SCRIPT = "ppo_continuous_action_envpool"
# 64 iterations of 8 envs x 16 steps: fast, and long enough to interrupt in the middle; the
# 50-step time limit makes episodes (and stale steps) happen
SMALL = [
    "--env-id",
    "HalfCheetah-v4",
    "--total-timesteps",
    "8192",
    "--num-envs",
    "8",
    "--num-steps",
    "16",
    "--max-episode-steps",
    "50",
]
ITERATIONS, BATCH = 64, 128


def non_stale_steps(steps_per_env: int, limit: int = 50) -> int:
    """Steps of one env that update the reward scaler in a run segment starting from a fresh reset
    with time limit `limit` and no terminations (HalfCheetah): every `limit + 1`-th step is stale."""
    return steps_per_env - steps_per_env // (limit + 1)


def test_checkpoint_round_trip_is_bit_exact(tmp_path):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    agent = Agent(17, 6)
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.95e-3, eps=1e-5)
    obs = torch.randn(16, 17)
    valid = torch.ones(16, dtype=torch.bool)
    for _ in range(3):  # real steps, so Adam's moments are not zeros
        loss, _ = ppo_loss(
            agent, obs, torch.randn(16, 6), torch.randn(16), torch.randn(16), torch.randn(16), torch.randn(16), valid, Args()
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    optimizer.param_groups[0]["lr"] = 1.2345e-3  # an adapted (--kl-adaptive-lr) rate, not the initial one
    obs_rms = RunningMeanStd((17,))
    reward_scaler = RewardScaler(4, 0.99, 10.0)
    value_rms = RunningMeanStd(())
    for _ in range(10):
        obs_rms.update(rng.normal(3.0, 7.0, size=(4, 17)))
        over = rng.random(4) < 0.2
        reward_scaler(rng.normal(1.0, 2.0, 4).astype(np.float32), over, np.zeros(4, dtype=bool))
        value_rms.update(rng.normal(-5.0, 3.0, size=37))
    random.seed(3)
    np.random.seed(4)
    path = str(tmp_path / "checkpoint.pt")
    state = {
        "script": SCRIPT,
        "model_state_dict": agent.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "rng": rng_states(),
        "obs_rms": obs_rms.state_dict(),
        "return_rms": reward_scaler.return_rms.state_dict(),
        "value_rms": value_rms.state_dict(),
        "learning_rate": optimizer.param_groups[0]["lr"],
    }
    save_checkpoint(path, state)
    assert not os.path.exists(path + ".tmp")
    expected_draws = (random.random(), np.random.rand(), torch.rand(3))

    restored = load_checkpoint(path, SCRIPT)
    agent2 = Agent(17, 6)
    optimizer2 = torch.optim.Adam(agent2.parameters(), lr=1.0)
    agent2.load_state_dict(restored["model_state_dict"])
    optimizer2.load_state_dict(restored["optimizer_state_dict"])
    set_rng_states(restored["rng"])
    draws = (random.random(), np.random.rand(), torch.rand(3))
    assert draws[0] == expected_draws[0] and draws[1] == expected_draws[1] and torch.equal(draws[2], expected_draws[2])
    for (name, p), p2 in zip(agent.state_dict().items(), agent2.state_dict().values()):
        assert torch.equal(p, p2), name
    saved_opt, restored_opt = optimizer.state_dict(), optimizer2.state_dict()
    assert saved_opt["param_groups"] == restored_opt["param_groups"]
    for key in saved_opt["state"]:
        for name, value in saved_opt["state"][key].items():
            assert torch.equal(value, restored_opt["state"][key][name]), (key, name)
    assert restored["learning_rate"] == 1.2345e-3

    obs_rms2, reward_scaler2, value_rms2 = RunningMeanStd((17,)), RewardScaler(4, 0.99, 10.0), RunningMeanStd(())
    obs_rms2.load_state_dict(restored["obs_rms"])
    reward_scaler2.return_rms.load_state_dict(restored["return_rms"])
    value_rms2.load_state_dict(restored["value_rms"])
    for before, after, count in [
        (obs_rms, obs_rms2, 40),
        (reward_scaler.return_rms, reward_scaler2.return_rms, 40),
        (value_rms, value_rms2, 370),
    ]:
        np.testing.assert_array_equal(after.mean, before.mean)
        np.testing.assert_array_equal(after.var, before.var)
        assert after.count == before.count == count

    # the restored run continues exactly: one more identical step of both gives identical weights
    for model, opt in ((agent, optimizer), (agent2, optimizer2)):
        torch.manual_seed(7)
        loss, _ = ppo_loss(
            model, obs, torch.randn(16, 6), torch.randn(16), torch.randn(16), torch.randn(16), torch.randn(16), valid, Args()
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    for (name, p), p2 in zip(agent.state_dict().items(), agent2.state_dict().values()):
        assert torch.equal(p, p2), name


@pytest.fixture(scope="module")
def interrupted_run(tmp_path_factory):
    """A run sent SIGINT after its first progress line."""
    log_dir = tmp_path_factory.mktemp("interrupted")
    return run_interrupted(SCRIPT, SMALL, log_dir)


def test_sigint_writes_a_checkpoint_and_exits_zero(interrupted_run):
    returncode, stdout, stderr, run_dir = interrupted_run
    assert returncode == 0, stderr[-2000:]
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    stopped_at = checkpoint["iteration"]
    assert (
        f"stopped at iteration {stopped_at}; checkpoint: {checkpoint_path} (continue with --resume {checkpoint_path})"
        in stdout
    )
    assert "Traceback" not in stderr
    assert 1 <= stopped_at < ITERATIONS
    assert checkpoint["global_step"] == stopped_at * BATCH
    assert checkpoint["script"] == SCRIPT and checkpoint["run_name"] == os.path.basename(run_dir)
    # the normaliser states are those of the run so far: the reset batch, then one batch per step
    assert float(checkpoint["obs_rms"]["count"]) == 8 * (16 * stopped_at + 1)
    assert float(checkpoint["return_rms"]["count"]) == 8 * non_stale_steps(16 * stopped_at)


def test_resume_continues_step_counter_lr_schedule_and_normalisers(interrupted_run):
    _, _, _, run_dir = interrupted_run
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    stopped = torch.load(checkpoint_path, weights_only=True)
    stopped_at = stopped["iteration"]
    result = run_script(SCRIPT, "--resume", checkpoint_path, "--checkpoint-every", "1000")
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        f"resumed {os.path.basename(run_dir)} at iteration {stopped_at} (global step {stopped_at * BATCH:,})" in result.stdout
    )
    scalars = read_scalars(run_dir)
    lr_steps = [step for step, _ in scalars["charts/learning_rate"]]
    assert lr_steps == [BATCH * i for i in range(1, ITERATIONS + 1)]  # one point per iteration, none twice
    for step, lr in scalars["charts/learning_rate"]:
        iteration = step // BATCH
        assert lr == pytest.approx(2.95e-3 * (1 - (iteration - 1) / ITERATIONS), rel=1e-6)
    assert [step for step, _ in scalars["losses/value_loss"]] == lr_steps
    final = torch.load(checkpoint_path, weights_only=True)
    assert final["iteration"] == ITERATIONS and final["global_step"] == ITERATIONS * BATCH
    # saved args rule, except where to resume from and how often to checkpoint
    assert final["args"]["num_steps"] == 16 and final["args"]["max_episode_steps"] == 50
    assert final["args"]["checkpoint_every"] == 1000 and final["args"]["resume"] == checkpoint_path
    # statistics carried on across the restart: both segments' observations (each from a fresh
    # reset) and non-stale returns, not just the resumed segment's
    resumed_steps = 16 * (ITERATIONS - stopped_at)
    assert float(final["obs_rms"]["count"]) == 8 * (16 * stopped_at + 1) + 8 * (resumed_steps + 1)
    assert float(final["return_rms"]["count"]) == 8 * (non_stale_steps(16 * stopped_at) + non_stale_steps(resumed_steps))


def test_killed_run_resumes_from_its_periodic_checkpoint(tmp_path):
    """A run with --checkpoint-every 2, --norm-value and --kl-adaptive-lr, killed (SIGKILL: no
    handler runs) once its first periodic checkpoint appears, then resumed. The target KL is so
    loose that the rule raises the rate after every epoch: the expected rate is known exactly and
    it must continue from the saved one, not restart from --learning-rate."""
    args = [
        "--env-id",
        "HalfCheetah-v4",
        "--total-timesteps",
        "4096",
        "--num-envs",
        "8",
        "--num-steps",
        "16",
        "--learning-rate",
        "1e-4",
        "--kl-adaptive-lr",
        "1e6",
        "--norm-value",
        "--checkpoint-every",
        "2",
        "--log-dir",
        str(tmp_path),
    ]
    process = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "cleanrl", f"{SCRIPT}.py"), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    deadline = time.time() + 300
    checkpoint_path = None
    while checkpoint_path is None and process.poll() is None and time.time() < deadline:
        found = [os.path.join(d, "checkpoint.pt") for d in tmp_path.glob("*") if (d / "checkpoint.pt").exists()]
        checkpoint_path = found[0] if found else None
        time.sleep(0.002)
    process.kill()
    _, stderr = process.communicate(timeout=60)
    assert checkpoint_path is not None, stderr[-2000:]
    killed = torch.load(checkpoint_path, weights_only=True)
    k = killed["iteration"]
    assert k % 2 == 0 and 2 <= k < 32, k  # a periodic checkpoint, not the final one

    result = run_script(SCRIPT, "--resume", checkpoint_path)
    assert result.returncode == 0, result.stderr[-2000:]
    expected, lr = {}, 1e-4
    for iteration in range(1, 33):
        for _ in range(2):  # update epochs
            lr = min(lr * 1.5, 1e-2)
        expected[iteration * BATCH] = lr
    assert killed["learning_rate"] == pytest.approx(expected[k * BATCH], rel=1e-12)
    logged = read_scalars(only_run_dir(tmp_path))["charts/learning_rate"]
    steps = [step for step, _ in logged]
    assert len(steps) == len(set(steps)) and steps[-(32 - k) :] == [BATCH * i for i in range(k + 1, 33)]
    for step, value in logged:
        assert value == pytest.approx(expected[step], rel=1e-6), step
    final = torch.load(checkpoint_path, weights_only=True)
    assert final["iteration"] == 32 and final["learning_rate"] == pytest.approx(1e-2)
    # 512 steps per env < the 1000-step limit: no boundary, no stale row; every return was valid
    assert float(final["value_rms"]["count"]) == 32 * BATCH
    assert float(final["return_rms"]["count"]) == 32 * BATCH
    assert float(final["obs_rms"]["count"]) == 32 * BATCH + 2 * 8  # two fresh resets
    assert float(killed["value_rms"]["count"]) == k * BATCH


def test_divergence_stops_and_keeps_the_last_good_checkpoint(interrupted_run, tmp_path):
    """Resume from a copy of a good checkpoint whose learning rate was set absurdly high: the next
    iteration overflows the weights. The run must stop naming the iteration, exit non-zero, and
    leave the good checkpoint in the run folder untouched."""
    _, _, _, run_dir = interrupted_run
    good_path = os.path.join(run_dir, "checkpoint.pt")
    good = torch.load(good_path, weights_only=True)
    good["iteration"], good["global_step"] = 2, 2 * BATCH  # resume early so the run is not already over
    save_checkpoint(good_path, good)
    digest = hashlib.sha256(open(good_path, "rb").read()).hexdigest()
    poisoned = dict(good, args={**good["args"], "learning_rate": 1e30})
    poisoned_path = str(tmp_path / "poisoned.pt")
    torch.save(poisoned, poisoned_path)

    result = run_script(SCRIPT, "--resume", poisoned_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert (
        f"non-finite loss or parameters at iteration 3 (global step {3 * BATCH}); last good checkpoint: {good_path}"
        in result.stderr
    )
    assert hashlib.sha256(open(good_path, "rb").read()).hexdigest() == digest


def test_divergence_without_checkpoint_says_so(tmp_path):
    result = run_script(SCRIPT, *SMALL, "--learning-rate", "1e30", "--log-dir", str(tmp_path))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"non-finite loss or parameters at iteration 1 (global step {BATCH}); no checkpoint was written" in result.stderr
    assert not os.path.exists(os.path.join(only_run_dir(tmp_path), "checkpoint.pt"))


def test_bad_resume_files_give_one_clear_line(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00not a checkpoint")
    other = tmp_path / "other.pt"
    torch.save({"script": "ppo_atari_envpool", "optimizer_state_dict": {}}, other)
    saved_model = tmp_path / f"{SCRIPT}.cleanrl_model"  # the --save-model file: weights, no optimiser
    torch.save({"script": SCRIPT, "model_state_dict": Agent(17, 6).state_dict(), "args": {}}, saved_model)
    for path, fragment in [
        (tmp_path / "missing.pt", "does not exist"),
        (junk, "is not a readable checkpoint"),
        (saved_model, "is not a resumable checkpoint"),
        (other, f"is a checkpoint of 'ppo_atari_envpool', not of '{SCRIPT}'"),
    ]:
        result = run_script(SCRIPT, "--resume", str(path), timeout=120)
        assert result.returncode != 0 and "Traceback" not in result.stderr
        lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and fragment in lines[0] and str(path) in lines[0], result.stderr
