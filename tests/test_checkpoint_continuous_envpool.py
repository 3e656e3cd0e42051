"""Checkpoint, resume, Ctrl-C, SIGTERM and divergence handling of cleanrl/ppo_continuous_action_envpool.py,
with real runs (subprocesses sent SIGINT or SIGTERM, one killed and resumed, one resumed from another
folder with new flags, damaged checkpoints, a forced divergence), including the in-script normaliser,
reward scaler, value normaliser and adaptive learning-rate states."""

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from helpers import REPO, only_run_dir, read_scalars, run_interrupted, run_script, wait_for_progress

from cleanrl.ppo_continuous_action_envpool import Agent, Args, RewardScaler, RunningMeanStd, ppo_loss
from cleanrl_utils.checkpoint import load_torch, save_torch, set_torch_rng_states, torch_rng_states

SCRIPT = "ppo_continuous_action_envpool"
KEYS = dict(
    model_state_dict=dict, optimizer_state_dict=dict, obs_rms=dict, return_rms=dict, value_rms=dict, learning_rate=float
)
# 8 envs x 16 steps per iteration; the 50-step time limit makes episodes (and stale steps) happen
SMALL = ["--env-id", "HalfCheetah-v4", "--num-envs", "8", "--num-steps", "16", "--max-episode-steps", "50"]
BATCH = 128
# A total no machine finishes in a test: a signal or kill always lands mid-run. The run is then
# resumed with a smaller --total-timesteps (a flag a resumed run may change) to finish it.
ENDLESS = ["--total-timesteps", "100000000"]
ENDLESS_ITERATIONS = 100_000_000 // BATCH


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
        "run_name": "run",
        "args": {},
        "iteration": 10,
        "global_step": 10 * BATCH,
        "model_state_dict": agent.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "rng": torch_rng_states(),
        "obs_rms": obs_rms.state_dict(),
        "return_rms": reward_scaler.return_rms.state_dict(),
        "value_rms": value_rms.state_dict(),
        "learning_rate": optimizer.param_groups[0]["lr"],
    }
    save_torch(path, state)
    assert not os.path.exists(path + ".tmp")
    expected_draws = (random.random(), np.random.rand(), torch.rand(3))

    restored = load_torch(path, SCRIPT, KEYS)
    agent2 = Agent(17, 6)
    optimizer2 = torch.optim.Adam(agent2.parameters(), lr=1.0)
    agent2.load_state_dict(restored["model_state_dict"])
    optimizer2.load_state_dict(restored["optimizer_state_dict"])
    set_torch_rng_states(restored["rng"])
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


def run_all(*arg_lists: list[str], cwd: str = REPO) -> list[subprocess.CompletedProcess]:
    """Run the script once per argument list, all at once: each of these runs only starts up and
    exits with an error, so side by side they take little longer than one."""
    command = [sys.executable, os.path.join(REPO, "cleanrl", f"{SCRIPT}.py")]
    pipe = subprocess.PIPE
    processes = [subprocess.Popen(command + args, stdout=pipe, stderr=pipe, text=True, cwd=cwd) for args in arg_lists]
    results = []
    for args, process in zip(arg_lists, processes):
        stdout, stderr = process.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(args, process.returncode, stdout, stderr))
    return results


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def interrupted_run(tmp_path_factory):
    """A run sent SIGINT (Ctrl-C) after its first progress line."""
    log_dir = tmp_path_factory.mktemp("interrupted")
    return run_interrupted(SCRIPT, SMALL + ENDLESS, log_dir)


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
    assert "Traceback" not in stderr and "Ctrl-C: stopping after this iteration" in stderr
    assert stopped_at >= 1
    assert checkpoint["global_step"] == stopped_at * BATCH
    assert checkpoint["script"] == SCRIPT and checkpoint["run_name"] == os.path.basename(run_dir)
    # the normaliser states are those of the run so far: the reset batch, then one batch per step
    assert float(checkpoint["obs_rms"]["count"]) == 8 * (16 * stopped_at + 1)
    assert float(checkpoint["return_rms"]["count"]) == 8 * non_stale_steps(16 * stopped_at)


def test_resume_continues_step_counter_lr_schedule_and_normalisers(interrupted_run):
    """Resumed with a smaller --total-timesteps, 16 iterations past the checkpoint (and a new
    --checkpoint-every and --save-model): the lr schedule is recomputed for the new length from the
    next iteration on."""
    _, _, _, run_dir = interrupted_run
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    stopped = torch.load(checkpoint_path, weights_only=True)
    stopped_at = stopped["iteration"]
    iterations = stopped_at + 16
    total = str(iterations * BATCH)
    flags = ["--total-timesteps", total, "--checkpoint-every", "1000", "--save-model"]  # flags a resumed run may change
    result = run_script(SCRIPT, "--resume", checkpoint_path, *flags)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        f"resumed {os.path.basename(run_dir)} at iteration {stopped_at} (global step {stopped_at * BATCH:,})" in result.stdout
    )
    scalars = read_scalars(run_dir)
    lr_steps = [step for step, _ in scalars["charts/learning_rate"]]
    assert lr_steps == [BATCH * i for i in range(1, iterations + 1)]  # one point per iteration, none twice
    for step, lr in scalars["charts/learning_rate"]:
        iteration = step // BATCH
        planned = ENDLESS_ITERATIONS if iteration <= stopped_at else iterations
        assert lr == pytest.approx(2.95e-3 * (1 - (iteration - 1) / planned), rel=1e-5)
    assert [step for step, _ in scalars["losses/value_loss"]] == lr_steps
    final = torch.load(checkpoint_path, weights_only=True)
    assert final["iteration"] == iterations and final["global_step"] == iterations * BATCH
    # saved args rule, except the flags a resumed run may change
    assert final["args"]["num_steps"] == 16 and final["args"]["max_episode_steps"] == 50
    assert final["args"]["checkpoint_every"] == 1000 and final["args"]["resume"] == checkpoint_path
    assert final["args"]["total_timesteps"] == iterations * BATCH and final["args"]["save_model"]
    assert os.path.isfile(os.path.join(run_dir, f"{SCRIPT}.cleanrl_model"))
    # statistics carried on across the restart: both segments' observations (each from a fresh
    # reset) and non-stale returns, not just the resumed segment's
    resumed_steps = 16 * (iterations - stopped_at)
    assert float(final["obs_rms"]["count"]) == 8 * (16 * stopped_at + 1) + 8 * (resumed_steps + 1)
    assert float(final["return_rms"]["count"]) == 8 * (non_stale_steps(16 * stopped_at) + non_stale_steps(resumed_steps))


# The adaptive rate with a target KL so loose that it rises x1.5 after each of the 2 epochs of
# every iteration, capped at 1e-2: the rate of every iteration is known exactly.
KL_ADAPTIVE = ["--learning-rate", "1e-4", "--kl-adaptive-lr", "1e6"]


def adapted_lr(iterations: int) -> float:
    return min(1e-4 * 1.5 ** (2 * iterations), 1e-2)


@pytest.fixture(scope="module")
def terminated_run(tmp_path_factory):
    """A run with --kl-adaptive-lr started in folder A with a relative --log-dir, stopped by SIGTERM
    (what SLURM, docker stop and Kubernetes send) once training is under way."""
    folder_a = tmp_path_factory.mktemp("A")
    process = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "cleanrl", f"{SCRIPT}.py"), *SMALL, *ENDLESS, *KL_ADAPTIVE, "--log-dir", "runs"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=folder_a,
    )
    head = wait_for_progress(process)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=300)
    return process.returncode, head + stdout, stderr, only_run_dir(folder_a / "runs")


def test_sigterm_writes_a_checkpoint_and_exits_zero(terminated_run):
    returncode, stdout, stderr, run_dir = terminated_run
    assert returncode == 0, stderr[-2000:]
    assert "Traceback" not in stderr and "SIGTERM: stopping after this iteration" in stderr
    assert f"run folder: {run_dir}" in stdout  # absolute, though --log-dir was relative
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    stopped_at = checkpoint["iteration"]
    assert (
        f"stopped at iteration {stopped_at}; checkpoint: {checkpoint_path} (continue with --resume {checkpoint_path})"
        in stdout
    )
    assert stopped_at >= 1 and checkpoint["global_step"] == stopped_at * BATCH
    assert checkpoint["learning_rate"] == pytest.approx(adapted_lr(stopped_at), rel=1e-5)


def test_killed_run_resumes_from_its_periodic_checkpoint(tmp_path):
    """A run with --checkpoint-every 2, --norm-value and --kl-adaptive-lr, killed (SIGKILL: no
    handler runs) once its first periodic checkpoint appears, then resumed to 4 iterations past
    that checkpoint. The adapted rate must continue from the saved one, not restart from
    --learning-rate. No time limit is reached (HalfCheetah never terminates): no stale rows."""
    args = [*SMALL[:6], *ENDLESS, *KL_ADAPTIVE, "--max-episode-steps", "1000000", "--norm-value"]
    args += ["--checkpoint-every", "2", "--log-dir", str(tmp_path)]
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
        time.sleep(0.01)
    process.kill()
    _, stderr = process.communicate(timeout=60)
    assert checkpoint_path is not None, stderr[-2000:]
    killed = torch.load(checkpoint_path, weights_only=True)
    k = killed["iteration"]
    assert k % 2 == 0 and k >= 2, k  # a periodic checkpoint: the run could not have ended

    iterations = k + 4
    result = run_script(SCRIPT, "--resume", checkpoint_path, "--total-timesteps", str(iterations * BATCH))
    assert result.returncode == 0, result.stderr[-2000:]
    assert killed["learning_rate"] == pytest.approx(adapted_lr(k), rel=1e-5)
    logged = read_scalars(only_run_dir(tmp_path))["charts/learning_rate"]
    steps = [step for step, _ in logged]
    assert len(steps) == len(set(steps)) and steps[-4:] == [BATCH * i for i in range(k + 1, iterations + 1)]
    for step, value in logged:
        assert value == pytest.approx(adapted_lr(step // BATCH), rel=1e-5), step
    final = torch.load(checkpoint_path, weights_only=True)
    assert final["iteration"] == iterations and final["learning_rate"] == pytest.approx(1e-2)
    # no boundary, no stale row: every return was valid
    assert float(final["value_rms"]["count"]) == iterations * BATCH
    assert float(final["return_rms"]["count"]) == iterations * BATCH
    assert float(final["obs_rms"]["count"]) == iterations * BATCH + 2 * 8  # two fresh resets
    assert float(killed["value_rms"]["count"]) == k * BATCH


def test_divergence_stops_and_keeps_the_last_good_checkpoint(terminated_run, tmp_path):
    """Resume a good checkpoint with an absurd --learning-rate (a flag a resumed run may change), from
    another folder: the next iteration overflows the weights. The run must stop naming the iteration,
    exit non-zero, and leave the good checkpoint in its run folder untouched; nothing is written where
    the command was started (the run's --log-dir was relative). The run uses --kl-adaptive-lr, whose
    saved adapted rate (at most 1e-2) would have kept it finite: the new --learning-rate replaces it."""
    _, _, _, run_dir = terminated_run
    good_dir = tmp_path / "runs" / "good"
    shutil.copytree(run_dir, good_dir)
    good_path = str(good_dir / "checkpoint.pt")
    k = torch.load(good_path, weights_only=True)["iteration"]
    digest = hashlib.sha256(open(good_path, "rb").read()).hexdigest()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    (result,) = run_all(["--resume", good_path, "--learning-rate", "1e30"], cwd=str(elsewhere))
    line = one_error_line(result)
    assert f"non-finite loss or parameters at iteration {k + 1} (global step {(k + 1) * BATCH:,}); " in line, line
    assert line.endswith(f"last good checkpoint: {good_path}; try a lower --learning-rate"), line
    assert hashlib.sha256(open(good_path, "rb").read()).hexdigest() == digest
    assert os.listdir(elsewhere) == []


def test_divergence_without_checkpoint_says_so(tmp_path):
    result = run_script(SCRIPT, *SMALL, "--total-timesteps", "8192", "--learning-rate", "1e30", "--log-dir", str(tmp_path))
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
    cases = [
        (tmp_path / "missing.pt", "does not exist"),
        (junk, "is not a readable checkpoint"),
        (saved_model, "is not a resumable checkpoint"),
        (other, f"is a checkpoint of 'ppo_atari_envpool', not of '{SCRIPT}'"),
    ]
    for (path, fragment), result in zip(cases, run_all(*[["--resume", str(path)] for path, _ in cases])):
        line = one_error_line(result)
        assert fragment in line and str(path) in line, line


def test_damaged_checkpoints_and_refused_flags_give_one_line_and_touch_nothing(interrupted_run, tmp_path):
    """This script's own checkpoint entries (here the observation statistics), missing or not
    fitting, and a flag that defines the run given with --resume: one line each, before anything
    is written into the run folder."""
    _, _, _, run_dir = interrupted_run
    saved = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    wrong_shape = {"mean": torch.zeros(3, dtype=torch.float64), "var": torch.ones(3, dtype=torch.float64)}
    damaged = {
        "no-obs-rms": ({key: value for key, value in saved.items() if key != "obs_rms"}, ["has no 'obs_rms' entry"]),
        "wrong-obs-rms": (
            saved | {"obs_rms": wrong_shape | {"count": torch.tensor(5.0)}},
            ["an 'obs_rms' entry that this script cannot restore", "shape (3,), where this run has (17,)"],
        ),
    }
    for name, (state, _) in damaged.items():
        os.makedirs(tmp_path / name)
        torch.save(state, tmp_path / name / "checkpoint.pt")
    good_dir = tmp_path / "good"
    shutil.copytree(run_dir, good_dir)
    before = sorted(os.listdir(good_dir))
    *damaged_results, refused = run_all(
        *[["--resume", str(tmp_path / name / "checkpoint.pt")] for name in damaged],
        ["--resume", str(good_dir / "checkpoint.pt"), "--norm-value"],
    )
    for (name, (_, fragments)), result in zip(damaged.items(), damaged_results):
        line = one_error_line(result)
        assert all(fragment in line for fragment in fragments) and str(tmp_path / name) in line, line
        assert os.listdir(tmp_path / name) == ["checkpoint.pt"]  # no events file, no new checkpoint
    line = one_error_line(refused)
    assert line.startswith("error: --norm-value True (saved: False) cannot change on --resume"), line
    assert sorted(os.listdir(good_dir)) == before
