"""Checkpoint, resume, Ctrl-C/SIGTERM and divergence handling of cleanrl/ppo.py and
cleanrl/ppo_continuous_action.py, with real runs (subprocesses sent SIGINT or SIGTERM, a rescue
learning rate that diverges, damaged and foreign resume files). ppo.py under --vector-mode sync saves
its envs too: a resumed run logs exactly what the uninterrupted run logged from that point on.

The interrupted runs ask for far more steps than any machine finishes in a test, so the signal always
lands mid-run; they are resumed with a smaller --total-timesteps (a flag a resumed run may change)."""

import hashlib
import io
import os
import pickle
import random
import shutil
import signal

import numpy as np
import pytest
import torch
from helpers import ATARI_TAGS, only_run_dir, read_scalars, run_interrupted, run_script

import cleanrl.ppo as ppo
import cleanrl.ppo_continuous_action as ppo_continuous
from cleanrl_utils.checkpoint import load_torch, save_torch, set_torch_rng_states, torch_rng_states
from cleanrl_utils.run import END_STEP_TAG
from cleanrl_utils.vector_env_state import EnvStateUnpickler, SavedVectorEnv, vector_env_state

ENDLESS = ["--total-timesteps", "100000000"]
# ppo.py: 4 CartPole envs x 64 steps per iteration, a 25-step limit (terminations and truncations).
# A constant learning rate, so that a run cut short and resumed to N iterations computes what a run
# planned for N iterations from the start computes.
PPO_SMALL = ["--env-id", "CartPole-v1", "--num-steps", "64", "--max-episode-steps", "25", "--no-anneal-lr"]
PPO_BATCH = 256
# ppo_continuous_action.py: 4 Hopper envs x 64 steps per iteration
CONT_SMALL = ["--env-id", "Hopper-v5", "--num-envs", "4", "--num-steps", "64", "--max-episode-steps", "50", "--seed", "3"]
CONT_BATCH, CONT_ENDLESS_ITERATIONS = 256, 100000000 // 256


def assert_bit_exact_round_trip(module, make_agent, tmp_path, extra_state: dict) -> dict:
    """Train an agent a few real steps, save a checkpoint holding what the script's checkpoints hold,
    load it back as the script does: parameters, Adam state and the next random draws of every RNG
    are identical."""
    agent = make_agent()
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=1e-5)
    obs_dim = agent.critic[0].in_features
    for _ in range(3):  # real steps, so Adam's moments are not zeros
        obs = torch.randn(32, obs_dim)
        with torch.no_grad():
            actions, logprobs, _, values = agent.get_action_and_value(obs)
        loss, _ = module.ppo_loss(agent, obs, actions, logprobs + 0.1, torch.randn(32), torch.randn(32), values, module.Args())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    random.seed(3)
    np.random.seed(4)
    path = str(tmp_path / "checkpoint.pt")
    state = {
        "script": module.SCRIPT,
        "run_name": "run",
        "args": {},
        "iteration": 3,
        "global_step": 768,
        "model_state_dict": agent.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "rng": torch_rng_states(),
        "recent_returns": [12.0, 30.0],
        **extra_state,
    }
    save_torch(path, state)
    assert not os.path.exists(path + ".tmp")
    expected_draws = (random.random(), np.random.rand(), torch.rand(3))

    keys = {name: object for name in extra_state} | {"recent_returns": list}
    restored = load_torch(path, module.SCRIPT, keys)
    agent2 = make_agent()
    optimizer2 = torch.optim.Adam(agent2.parameters(), lr=1.0)
    agent2.load_state_dict(restored["model_state_dict"])
    optimizer2.load_state_dict(restored["optimizer_state_dict"])
    set_torch_rng_states(restored["rng"])
    for (name, p), p2 in zip(agent.state_dict().items(), agent2.state_dict().values()):
        assert torch.equal(p, p2), name
    saved_opt, restored_opt = optimizer.state_dict(), optimizer2.state_dict()
    assert saved_opt["param_groups"] == restored_opt["param_groups"]
    assert saved_opt["state"].keys() == restored_opt["state"].keys()
    for key in saved_opt["state"]:
        for name, value in saved_opt["state"][key].items():
            assert torch.equal(value, restored_opt["state"][key][name]), (key, name)
    draws = (random.random(), np.random.rand(), torch.rand(3))
    assert draws[0] == expected_draws[0] and draws[1] == expected_draws[1] and torch.equal(draws[2], expected_draws[2])
    assert restored["recent_returns"] == [12.0, 30.0]
    return restored


def test_ppo_round_trip_is_bit_exact_and_envs_continue_the_same_episodes(tmp_path):
    torch.manual_seed(0)
    envs = ppo.make_env("CartPole-v1", 3, "sync", max_episode_steps=25)
    next_obs, _ = envs.reset(seed=7)
    rng = np.random.default_rng(0)
    for _ in range(37):  # mid-episode: CartPole state, TimeLimit counters and returns are non-zero
        next_obs, *_ = envs.step(rng.integers(0, 2, 3))
    assert envs.episode_count > 0 and envs.episode_lengths.min() > 0
    extra = {"env_state": SavedVectorEnv(envs).state_dict(), "next_obs": torch.as_tensor(next_obs)}
    restored = assert_bit_exact_round_trip(ppo, lambda: ppo.Agent(4, 2), tmp_path, extra)
    assert torch.equal(restored["next_obs"], torch.as_tensor(next_obs))

    copy = ppo.make_env("CartPole-v1", 3, "sync", max_episode_steps=25)
    copy.reset(seed=123)  # a different state, overwritten by the checkpoint's
    SavedVectorEnv(copy).load_state_dict(restored["env_state"])  # as restore_torch does it
    boundaries = 0
    for _ in range(200):
        action = rng.integers(0, 2, 3)
        expected, got = envs.step(action), copy.step(action)
        for a, b in zip(expected[:4], got[:4]):
            np.testing.assert_array_equal(a, b)
        assert ("episode" in expected[4]) == ("episode" in got[4])
        if "episode" in expected[4]:
            boundaries += 1
            for key in ("r", "l"):
                np.testing.assert_array_equal(expected[4]["episode"][key], got[4]["episode"][key])
            over = expected[4]["_final_obs"]
            np.testing.assert_array_equal(over, got[4]["_final_obs"])
            np.testing.assert_array_equal(np.stack(expected[4]["final_obs"][over]), np.stack(got[4]["final_obs"][over]))
    assert boundaries > 20 and copy.episode_count == envs.episode_count
    envs.close()
    copy.close()
    # Subprocess envs cannot be snapshotted: a resumed async run starts fresh episodes.
    async_envs = ppo.make_env("CartPole-v1", 2, "async")
    async_envs.reset(seed=1)
    assert vector_env_state(async_envs) is None
    SavedVectorEnv(async_envs).load_state_dict(None)  # such a checkpoint's env state: nothing to restore
    async_envs.close()


def test_env_state_unpickler_refuses_anything_but_gymnasium_and_numpy():
    with pytest.raises(pickle.UnpicklingError, match="posix.system"):
        EnvStateUnpickler(io.BytesIO(pickle.dumps([os.system]))).load()
    with pytest.raises(pickle.UnpicklingError, match="gymnasium.envs.registration.make"):  # a function, not a class
        import gymnasium

        EnvStateUnpickler(io.BytesIO(pickle.dumps(gymnasium.make))).load()


def test_continuous_round_trip_restores_the_normalisers_exactly(tmp_path):
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    obs_rms = ppo_continuous.RunningMeanStd((11,))
    scaler = ppo_continuous.RewardScaler(4, 0.99, 10.0)
    for _ in range(25):
        obs_rms.update(rng.normal(3.0, 2.0, size=(4, 11)))
        scaler(rng.normal(size=4), rng.random(4) < 0.1)
    extra = {"obs_rms": obs_rms.state_dict(), "return_rms": scaler.return_rms.state_dict()}
    restored = assert_bit_exact_round_trip(ppo_continuous, lambda: ppo_continuous.Agent(11, 3), tmp_path, extra)
    obs_rms2, scaler2 = ppo_continuous.RunningMeanStd((11,)), ppo_continuous.RewardScaler(4, 0.99, 10.0)
    obs_rms2.load_state_dict(restored["obs_rms"])
    scaler2.return_rms.load_state_dict(restored["return_rms"])
    for saved, loaded in ((obs_rms, obs_rms2), (scaler.return_rms, scaler2.return_rms)):
        np.testing.assert_array_equal(saved.mean, loaded.mean)
        np.testing.assert_array_equal(saved.var, loaded.var)
        assert saved.count == loaded.count and isinstance(loaded.count, float)
    obs = rng.normal(3.0, 2.0, size=(4, 11))
    np.testing.assert_array_equal(
        ppo_continuous.normalize_obs(obs, obs_rms, 10.0), ppo_continuous.normalize_obs(obs, obs_rms2, 10.0)
    )


# ---- ppo.py, real runs ----


@pytest.fixture(scope="module")
def ppo_interrupted(tmp_path_factory):
    """Ctrl-C (SIGINT) once training is under way."""
    return run_interrupted("ppo", [*PPO_SMALL, *ENDLESS], tmp_path_factory.mktemp("interrupted"))


@pytest.fixture(scope="module")
def ppo_iterations(ppo_interrupted) -> int:
    """The length of the comparison: three iterations past the checkpoint."""
    _, _, _, run_dir = ppo_interrupted
    return torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["iteration"] + 3


@pytest.fixture(scope="module")
def ppo_uninterrupted(tmp_path_factory, ppo_iterations):
    """The reference: a run of that length from the start to the end, writing a checkpoint every 2
    iterations (which must not change anything it computes)."""
    log_dir = tmp_path_factory.mktemp("uninterrupted")
    total = str(ppo_iterations * PPO_BATCH)
    result = run_script("ppo", *PPO_SMALL, "--total-timesteps", total, "--checkpoint-every", "2", "--log-dir", str(log_dir))
    assert result.returncode == 0, result.stderr[-2000:]
    return only_run_dir(log_dir)


def test_ppo_sigint_writes_a_checkpoint_and_exits_zero(ppo_interrupted):
    returncode, stdout, stderr, run_dir = ppo_interrupted
    assert returncode == 0, stderr[-2000:]
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    assert stdout.split("run folder: ")[0].startswith("torch threads: ")  # the speed levers come first
    assert f"\nrun folder: {run_dir}\n" in stdout
    assert f"checkpoint: {checkpoint_path} (continue with --resume {checkpoint_path})" in stdout
    assert "Traceback" not in stderr and "Ctrl-C: stopping after this iteration" in stderr
    assert os.path.exists(checkpoint_path), (os.listdir(run_dir), stdout, stderr)
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    assert checkpoint["iteration"] >= 1
    assert checkpoint["global_step"] == checkpoint["iteration"] * PPO_BATCH
    assert f"stopped at iteration {checkpoint['iteration']};" in stdout
    assert checkpoint["env_state"] is not None and checkpoint["next_obs"].shape == (4, 4)


@pytest.mark.parametrize("vector_mode", ["sync", "async"])
def test_ppo_sigterm_writes_a_checkpoint_and_exits_zero(tmp_path, vector_mode):
    """SIGTERM, what schedulers send (SLURM, docker stop, Kubernetes), is handled as Ctrl-C is. Under
    async it goes to the whole process group, env workers included: they ignore it, the main
    process finishes the iteration, checkpoints and closes them, and no worker prints a traceback."""
    args = [*PPO_SMALL, *ENDLESS, "--vector-mode", vector_mode]
    returncode, stdout, stderr, run_dir = run_interrupted(
        "ppo", args, tmp_path, process_group=vector_mode == "async", signum=signal.SIGTERM
    )
    assert returncode == 0, stderr[-2000:]
    assert "Traceback" not in stderr and "SIGTERM: stopping after this iteration" in stderr, stderr
    checkpoint = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    assert checkpoint["iteration"] >= 1 and f"stopped at iteration {checkpoint['iteration']};" in stdout
    assert (checkpoint["env_state"] is None) == (vector_mode == "async")  # subprocess envs are not saved


@pytest.fixture(scope="module")
def ppo_resumed(ppo_interrupted, ppo_iterations, tmp_path_factory):
    """The interrupted run resumed (a copy of its folder, so the other tests keep the original) to the
    reference's length, with --save-model: both are flags a resumed run may change."""
    _, _, _, run_dir = ppo_interrupted
    copy_dir = tmp_path_factory.mktemp("resumed") / os.path.basename(run_dir)
    shutil.copytree(run_dir, copy_dir)
    checkpoint_path = str(copy_dir / "checkpoint.pt")
    total = str(ppo_iterations * PPO_BATCH)
    result = run_script("ppo", "--resume", checkpoint_path, "--total-timesteps", total, "--save-model")
    return result, copy_dir


def test_ppo_resume_logs_exactly_what_the_uninterrupted_run_logged(ppo_interrupted, ppo_uninterrupted, ppo_resumed):
    """Every scalar of the resumed run equals the uninterrupted run's, bit for bit: losses, learning
    rate, and the episodes, including those the checkpoint cut in the middle. The resumed run writes
    into the checkpoint's own folder, not under the --log-dir saved in its arguments."""
    _, _, _, run_dir = ppo_interrupted
    result, copy_dir = ppo_resumed
    checkpoint = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    stopped_step, iterations = checkpoint["global_step"], checkpoint["iteration"] + 3
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("run folder: ")[0].startswith("torch threads: ")  # the speed levers come first
    assert f"\nrun folder: {copy_dir}\n" in result.stdout
    assert f"resumed {copy_dir.name} at iteration {checkpoint['iteration']}" in result.stdout
    expected, resumed = read_scalars(ppo_uninterrupted), read_scalars(str(copy_dir))
    assert set(resumed) == ATARI_TAGS | {END_STEP_TAG, "charts/torch_threads"}  # where each part ended; the threads it used
    lr_steps = [step for step, _ in resumed["charts/learning_rate"]]
    assert lr_steps == [PPO_BATCH * i for i in range(1, iterations + 1)]  # one point per iteration, none twice
    for tag in sorted(ATARI_TAGS - {"charts/SPS"}):
        assert [x for x in resumed[tag] if x[0] > stopped_step] == [x for x in expected[tag] if x[0] > stopped_step], tag
        assert resumed[tag] == expected[tag], tag  # and the part before the checkpoint, from the copied events
    # Episodes that were running when the checkpoint was written ended after it with their full length
    # (steps per env so far - length < steps per env at the checkpoint): the envs were restored.
    cut = [(step, length) for step, length in resumed["charts/episodic_length"] if step > stopped_step]
    assert any(step // 4 - length < stopped_step // 4 for step, length in cut)
    final = torch.load(copy_dir / "checkpoint.pt", weights_only=True)
    assert final["iteration"] == iterations and final["args"]["total_timesteps"] == iterations * PPO_BATCH
    assert os.path.isfile(copy_dir / "ppo.cleanrl_model")  # --save-model, given with --resume, applied
    assert len([f for f in os.listdir(run_dir) if f.startswith("events")]) == 1  # the original folder untouched


def test_ppo_resuming_a_finished_run_says_so(ppo_resumed):
    """...and logs nothing: no iteration ran, so no new events file (trial 26, K14: one held only a repeat of the
    hyperparameters and of the end step)."""
    _, copy_dir = ppo_resumed
    before = sorted(os.listdir(copy_dir))
    result = run_script("ppo", "--resume", str(copy_dir / "checkpoint.pt"), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "already ran its" in result.stdout and "a larger --total-timesteps extends it" in result.stdout
    assert sorted(os.listdir(copy_dir)) == before


def test_ppo_a_flag_that_defines_the_run_cannot_change_on_resume(ppo_interrupted):
    _, _, _, run_dir = ppo_interrupted
    before = sorted(os.listdir(run_dir))
    result = run_script("ppo", "--resume", os.path.join(run_dir, "checkpoint.pt"), "--vector-mode", "async", timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --vector-mode async (saved: sync) cannot change on --resume")
    assert sorted(os.listdir(run_dir)) == before


def test_ppo_divergence_stops_and_keeps_the_last_good_checkpoint(ppo_interrupted, tmp_path):
    """Resume a good checkpoint with an absurd --learning-rate (a flag a resumed run may change): the
    next iteration overflows. The run stops naming the iteration, exits non-zero, and leaves the good
    checkpoint in its run folder untouched."""
    _, _, _, run_dir = ppo_interrupted
    good_dir = tmp_path / "good"
    shutil.copytree(run_dir, good_dir)
    good_path = str(good_dir / "checkpoint.pt")
    digest = hashlib.sha256(open(good_path, "rb").read()).hexdigest()
    good = torch.load(good_path, weights_only=True)

    result = run_script("ppo", "--resume", good_path, "--learning-rate", "1e30", timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    iteration = good["iteration"] + 1
    assert (
        f"non-finite loss or parameters at iteration {iteration} (global step {iteration * PPO_BATCH:,}); "
        f"last good checkpoint: {good_path}"
    ) in result.stderr
    assert hashlib.sha256(open(good_path, "rb").read()).hexdigest() == digest


@pytest.mark.parametrize("vector_mode", ["sync", "async"])
def test_ppo_divergence_without_checkpoint_says_so(tmp_path, vector_mode):
    """Under async the exit also closes the env workers (they ignore SIGTERM, which multiprocessing
    sends them at exit): the run ends at once instead of waiting for them forever."""
    args = [*PPO_SMALL, "--total-timesteps", "4096", "--learning-rate", "1e30", "--vector-mode", vector_mode]
    result = run_script("ppo", *args, "--log-dir", str(tmp_path), timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "non-finite loss or parameters at iteration 1 (global step 256); no checkpoint was written" in result.stderr
    assert not os.path.exists(os.path.join(only_run_dir(tmp_path), "checkpoint.pt"))


# ---- ppo_continuous_action.py, real runs (async envs, Ctrl-C to the whole process group) ----


@pytest.fixture(scope="module")
def continuous_interrupted(tmp_path_factory):
    """Ctrl-C as a terminal sends it: to the main process and its env subprocesses alike."""
    log_dir = tmp_path_factory.mktemp("continuous")
    args = [*CONT_SMALL, *ENDLESS, "--vector-mode", "async"]
    return run_interrupted("ppo_continuous_action", args, log_dir, process_group=True)


def test_continuous_ctrl_c_with_async_envs_writes_a_checkpoint_and_exits_zero(continuous_interrupted):
    returncode, stdout, stderr, run_dir = continuous_interrupted
    assert returncode == 0, stderr[-2000:]
    assert "Traceback" not in stderr
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    assert f"checkpoint: {checkpoint_path}" in stdout
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    iteration = checkpoint["iteration"]
    assert iteration >= 1 and checkpoint["global_step"] == iteration * CONT_BATCH
    # every observation the envs returned (4 reset ones, then 4 per step) entered the statistics once
    assert checkpoint["obs_rms"]["count"].item() == 4 * (1 + iteration * 64)
    assert checkpoint["return_rms"]["count"].item() == iteration * CONT_BATCH


def test_continuous_resume_continues_steps_lr_and_normalisers(continuous_interrupted):
    """Resumed to two iterations past the checkpoint: the lr schedule is recomputed for the new length
    (iteration i of n runs at lr * (1 - (i - 1) / n)), the step counter and normalisers carry on."""
    _, _, _, run_dir = continuous_interrupted
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    saved = torch.load(checkpoint_path, weights_only=True)
    iterations = saved["iteration"] + 2
    total = iterations * CONT_BATCH
    result = run_script("ppo_continuous_action", "--resume", checkpoint_path, "--total-timesteps", str(total))
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"resumed {os.path.basename(run_dir)} at iteration {saved['iteration']}" in result.stdout
    scalars = read_scalars(run_dir)
    lr_steps = [step for step, _ in scalars["charts/learning_rate"]]
    assert lr_steps == [CONT_BATCH * i for i in range(1, iterations + 1)]  # one point per iteration, none twice
    for step, lr in scalars["charts/learning_rate"]:
        i = step // CONT_BATCH
        planned = iterations if i > saved["iteration"] else CONT_ENDLESS_ITERATIONS
        assert lr == pytest.approx(0.00295 * (1 - (i - 1) / planned), rel=1e-5)
    for tag in ("losses/value_loss", "charts/episodic_length"):
        steps = [step for step, _ in scalars[tag]]
        assert steps == sorted(steps) and steps[-1] > saved["global_step"], tag
    final = torch.load(checkpoint_path, weights_only=True)
    assert final["iteration"] == iterations and final["global_step"] == total
    # The counts carried on from the checkpoint's: the fresh reset after resuming adds 4 observations.
    assert final["obs_rms"]["count"].item() == 4 * (1 + iterations * 64) + 4
    assert final["return_rms"]["count"].item() == total
    changed = {"resume": checkpoint_path, "total_timesteps": total, "num_iterations": iterations}
    assert final["args"] == {**saved["args"], **changed}  # and nothing else


def test_continuous_divergence_stops_and_keeps_the_last_good_checkpoint(continuous_interrupted, tmp_path):
    _, _, _, run_dir = continuous_interrupted
    good_dir = tmp_path / "good"
    shutil.copytree(run_dir, good_dir)
    good_path = str(good_dir / "checkpoint.pt")
    good = torch.load(good_path, weights_only=True)
    good["iteration"], good["global_step"] = 2, 512  # resume early, whatever the run reached
    good["args"]["vector_mode"] = "sync"  # no subprocesses needed here
    save_torch(good_path, good)
    digest = hashlib.sha256(open(good_path, "rb").read()).hexdigest()

    result = run_script("ppo_continuous_action", "--resume", good_path, "--learning-rate", "1e30", timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert (
        f"non-finite loss or parameters at iteration 3 (global step 768); last good checkpoint: {good_path}" in result.stderr
    )
    assert hashlib.sha256(open(good_path, "rb").read()).hexdigest() == digest


def tampered_env_state(checkpoint: dict) -> dict:
    """The env state with its sub-envs pickle replaced by one that would call os.system on load."""
    sub_envs = torch.frombuffer(bytearray(pickle.dumps([os.system])), dtype=torch.uint8)
    return {**checkpoint["env_state"], "sub_envs": sub_envs}


@pytest.mark.parametrize(
    "script,damage,fragments",
    [
        ("ppo", lambda c: c.pop("env_state"), ["has no 'env_state' entry"]),
        ("ppo", lambda c: c.update(env_state=tampered_env_state(c)), ["env state", "posix.system is not allowed"]),
        (
            "ppo_continuous_action",
            lambda c: c.update(obs_rms={}),
            ["an 'obs_rms' entry that this script cannot restore", "KeyError"],
        ),
    ],
)
def test_a_damaged_checkpoint_gives_one_line_and_touches_nothing(
    script, damage, fragments, ppo_interrupted, continuous_interrupted, tmp_path
):
    """Checked before anything is written: no events file, no new checkpoint, one line."""
    _, _, _, run_dir = ppo_interrupted if script == "ppo" else continuous_interrupted
    checkpoint = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    checkpoint["args"]["vector_mode"] = "sync"  # no subprocesses needed here
    damage(checkpoint)
    damaged = tmp_path / "checkpoint.pt"
    torch.save(checkpoint, damaged)
    result = run_script(script, "--resume", str(damaged), timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: --resume {str(damaged)!r}"), result.stderr
    assert all(fragment in lines[0] for fragment in fragments), lines[0]
    assert os.listdir(tmp_path) == ["checkpoint.pt"]


@pytest.mark.parametrize("script,other", [("ppo", "ppo_continuous_action"), ("ppo_continuous_action", "ppo")])
def test_bad_resume_files_give_one_clear_line(script, other, tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00not a checkpoint")
    weights_only = tmp_path / "model.cleanrl_model"  # a saved model: no optimiser state
    torch.save({"script": script, "model_state_dict": {}, "args": {}}, weights_only)
    other_path = tmp_path / "other.pt"
    torch.save({"script": other, "optimizer_state_dict": {}}, other_path)
    for path, fragment in [
        (tmp_path / "missing.pt", "does not exist"),
        (junk, "is not a readable checkpoint"),
        (weights_only, "is not a resumable checkpoint"),
        (other_path, f"is a checkpoint of {other!r}, not of {script!r}"),
    ]:
        result = run_script(script, "--resume", str(path), timeout=120)
        assert result.returncode != 0 and "Traceback" not in result.stderr
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
        assert fragment in lines[0] and str(path) in lines[0], lines[0]
