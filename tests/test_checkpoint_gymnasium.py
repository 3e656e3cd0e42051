"""Checkpoint, resume, Ctrl-C and divergence handling of cleanrl/ppo.py and
cleanrl/ppo_continuous_action.py, with real runs (subprocesses sent SIGINT, a poisoned checkpoint,
bad resume files). ppo.py under --vector-mode sync saves its envs too: a resumed run logs exactly
what the uninterrupted run logged from that point on."""

import hashlib
import io
import os
import pickle
import random
import shutil

import numpy as np
import pytest
import torch
from helpers import ATARI_TAGS, only_run_dir, read_scalars, run_interrupted, run_script

import cleanrl.ppo as ppo
import cleanrl.ppo_continuous_action as ppo_continuous

# ppo.py: 16 iterations of 4 CartPole envs x 64 steps, a 25-step limit (terminations and
# truncations); long enough to interrupt in the middle
PPO_SMALL = ["--env-id", "CartPole-v1", "--total-timesteps", "4096", "--num-steps", "64", "--max-episode-steps", "25"]
PPO_BATCH, PPO_ITERATIONS = 256, 16
# ppo_continuous_action.py: 8 iterations of 4 Hopper envs x 64 steps
CONT_SMALL = [
    "--env-id",
    "Hopper-v5",
    "--total-timesteps",
    "2048",
    "--num-envs",
    "4",
    "--num-steps",
    "64",
    "--max-episode-steps",
    "50",
    "--seed",
    "3",
]
CONT_BATCH, CONT_ITERATIONS = 256, 8


def assert_bit_exact_round_trip(module, make_agent, tmp_path, extra_state: dict) -> dict:
    """Train an agent a few real steps, save through the script's save_checkpoint, reload through its
    load_checkpoint: parameters, Adam state and the next random draws of every RNG are identical."""
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
    script = module.__name__.split(".")[-1]
    state = {
        "script": script,
        "model_state_dict": agent.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "rng": module.rng_states(),
        **extra_state,
    }
    module.save_checkpoint(path, state)
    assert not os.path.exists(path + ".tmp")
    torch.load(path, weights_only=True)
    expected_draws = (random.random(), np.random.rand(), torch.rand(3))

    restored = module.load_checkpoint(path, script)
    agent2 = make_agent()
    optimizer2 = torch.optim.Adam(agent2.parameters(), lr=1.0)
    agent2.load_state_dict(restored["model_state_dict"])
    optimizer2.load_state_dict(restored["optimizer_state_dict"])
    module.set_rng_states(restored["rng"])
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
    return restored


def test_ppo_round_trip_is_bit_exact_and_envs_continue_the_same_episodes(tmp_path):
    torch.manual_seed(0)
    envs = ppo.make_env("CartPole-v1", 3, "sync", max_episode_steps=25)
    envs.reset(seed=7)
    rng = np.random.default_rng(0)
    for _ in range(37):  # mid-episode: CartPole state, TimeLimit counters and returns are non-zero
        envs.step(rng.integers(0, 2, 3))
    assert envs.episode_count > 0 and envs.episode_lengths.min() > 0
    restored = assert_bit_exact_round_trip(ppo, lambda: ppo.Agent(4, 2), tmp_path, {"env_state": ppo.vector_env_state(envs)})

    copy = ppo.make_env("CartPole-v1", 3, "sync", max_episode_steps=25)
    copy.reset(seed=123)  # a different state, overwritten by the checkpoint's
    ppo.set_vector_env_state(copy, restored["env_state"])
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
    assert ppo.vector_env_state(async_envs) is None
    async_envs.close()


def test_env_state_unpickler_refuses_anything_but_gymnasium_and_numpy():
    with pytest.raises(pickle.UnpicklingError, match="posix.system"):
        ppo.EnvStateUnpickler(io.BytesIO(pickle.dumps([os.system]))).load()
    with pytest.raises(pickle.UnpicklingError, match="gymnasium.envs.registration.make"):  # a function, not a class
        import gymnasium

        ppo.EnvStateUnpickler(io.BytesIO(pickle.dumps(gymnasium.make))).load()


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
def ppo_uninterrupted(tmp_path_factory):
    """The reference: the same run to the end, writing a checkpoint every 5 iterations (which must
    not change anything it computes)."""
    log_dir = tmp_path_factory.mktemp("uninterrupted")
    result = run_script("ppo", *PPO_SMALL, "--checkpoint-every", "5", "--log-dir", str(log_dir))
    assert result.returncode == 0, result.stderr[-2000:]
    return only_run_dir(log_dir)


@pytest.fixture(scope="module")
def ppo_interrupted(tmp_path_factory):
    return run_interrupted("ppo", PPO_SMALL, tmp_path_factory.mktemp("interrupted"))


def test_ppo_sigint_writes_a_checkpoint_and_exits_zero(ppo_interrupted):
    returncode, stdout, stderr, run_dir = ppo_interrupted
    assert returncode == 0, stderr[-2000:]
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    assert f"checkpoint: {checkpoint_path} (continue with --resume {checkpoint_path})" in stdout
    assert "Traceback" not in stderr
    assert os.path.exists(checkpoint_path), (os.listdir(run_dir), stdout, stderr)
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    assert 1 <= checkpoint["iteration"] < PPO_ITERATIONS
    assert checkpoint["global_step"] == checkpoint["iteration"] * PPO_BATCH
    assert f"stopped at iteration {checkpoint['iteration']};" in stdout
    assert checkpoint["env_state"] is not None and checkpoint["next_obs"].shape == (4, 4)


def test_ppo_resume_logs_exactly_what_the_uninterrupted_run_logged(ppo_uninterrupted, ppo_interrupted, tmp_path):
    """Resume the interrupted run (a copy of its folder, in a fresh log dir) and compare every
    scalar with the uninterrupted run's, bit for bit: losses, learning rate, and the episodes,
    including those the checkpoint cut in the middle."""
    _, _, _, run_dir = ppo_interrupted
    copy_dir = tmp_path / os.path.basename(run_dir)
    shutil.copytree(run_dir, copy_dir)
    checkpoint_path = str(copy_dir / "checkpoint.pt")
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    checkpoint["args"]["log_dir"] = str(tmp_path)  # the copy is the run folder now
    torch.save(checkpoint, checkpoint_path)
    stopped_step = checkpoint["global_step"]

    result = run_script("ppo", "--resume", checkpoint_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"resumed {copy_dir.name} at iteration {checkpoint['iteration']}" in result.stdout
    expected, resumed = read_scalars(ppo_uninterrupted), read_scalars(str(copy_dir))
    assert set(resumed) == ATARI_TAGS
    lr_steps = [step for step, _ in resumed["charts/learning_rate"]]
    assert lr_steps == [PPO_BATCH * i for i in range(1, PPO_ITERATIONS + 1)]  # one point per iteration, none twice
    for tag in sorted(ATARI_TAGS - {"charts/SPS"}):
        assert [x for x in resumed[tag] if x[0] > stopped_step] == [x for x in expected[tag] if x[0] > stopped_step], tag
        assert resumed[tag] == expected[tag], tag  # and the part before the checkpoint, from the copied events
    # Episodes that were running when the checkpoint was written ended after it with their full length
    # (steps per env so far - length < steps per env at the checkpoint): the envs were restored.
    cut = [(step, length) for step, length in resumed["charts/episodic_length"] if step > stopped_step]
    assert any(step // 4 - length < stopped_step // 4 for step, length in cut)
    assert torch.load(checkpoint_path, weights_only=True)["iteration"] == PPO_ITERATIONS


def test_ppo_divergence_stops_and_keeps_the_last_good_checkpoint(ppo_interrupted, tmp_path):
    """Resume from a copy of a good checkpoint whose learning rate was set absurdly high: the next
    iteration overflows. The run stops naming the iteration, exits non-zero, and leaves the good
    checkpoint in the run folder untouched."""
    _, _, _, run_dir = ppo_interrupted
    good_path = os.path.join(run_dir, "checkpoint.pt")
    digest = hashlib.sha256(open(good_path, "rb").read()).hexdigest()
    good = torch.load(good_path, weights_only=True)
    poisoned_path = str(tmp_path / "poisoned.pt")
    torch.save(dict(good, args={**good["args"], "learning_rate": 1e30}), poisoned_path)

    result = run_script("ppo", "--resume", poisoned_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    iteration = good["iteration"] + 1
    assert (
        f"non-finite loss or parameters at iteration {iteration} (global step {iteration * PPO_BATCH:,}); "
        f"last good checkpoint: {good_path}"
    ) in result.stderr
    assert hashlib.sha256(open(good_path, "rb").read()).hexdigest() == digest


def test_ppo_divergence_without_checkpoint_says_so(tmp_path):
    result = run_script("ppo", *PPO_SMALL, "--learning-rate", "1e30", "--log-dir", str(tmp_path))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "non-finite loss or parameters at iteration 1 (global step 256); no checkpoint was written" in result.stderr
    assert not os.path.exists(os.path.join(only_run_dir(tmp_path), "checkpoint.pt"))


# ---- ppo_continuous_action.py, real runs (async envs, Ctrl-C to the whole process group) ----


@pytest.fixture(scope="module")
def continuous_interrupted(tmp_path_factory):
    """Ctrl-C as a terminal sends it: to the main process and its env subprocesses alike."""
    log_dir = tmp_path_factory.mktemp("continuous")
    return run_interrupted("ppo_continuous_action", [*CONT_SMALL, "--vector-mode", "async"], log_dir, process_group=True)


def test_continuous_ctrl_c_with_async_envs_writes_a_checkpoint_and_exits_zero(continuous_interrupted):
    returncode, stdout, stderr, run_dir = continuous_interrupted
    assert returncode == 0, stderr[-2000:]
    assert "Traceback" not in stderr
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    assert f"checkpoint: {checkpoint_path}" in stdout
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    iteration = checkpoint["iteration"]
    assert 1 <= iteration < CONT_ITERATIONS and checkpoint["global_step"] == iteration * CONT_BATCH
    # every observation the envs returned (4 reset ones, then 4 per step) entered the statistics once
    assert checkpoint["obs_rms"]["count"].item() == 4 * (1 + iteration * 64)
    assert checkpoint["return_rms"]["count"].item() == iteration * CONT_BATCH


def test_continuous_resume_continues_steps_lr_and_normalisers(continuous_interrupted):
    _, _, _, run_dir = continuous_interrupted
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    saved = torch.load(checkpoint_path, weights_only=True)
    result = run_script("ppo_continuous_action", "--resume", checkpoint_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"resumed {os.path.basename(run_dir)} at iteration {saved['iteration']}" in result.stdout
    scalars = read_scalars(run_dir)
    lr_steps = [step for step, _ in scalars["charts/learning_rate"]]
    assert lr_steps == [CONT_BATCH * i for i in range(1, CONT_ITERATIONS + 1)]  # one point per iteration, none twice
    for step, lr in scalars["charts/learning_rate"]:
        assert lr == pytest.approx(0.00295 * (1 - (step // CONT_BATCH - 1) / CONT_ITERATIONS), rel=1e-6)
    for tag in ("losses/value_loss", "charts/episodic_length"):
        steps = [step for step, _ in scalars[tag]]
        assert steps == sorted(steps) and steps[-1] > saved["global_step"], tag
    final = torch.load(checkpoint_path, weights_only=True)
    assert final["iteration"] == CONT_ITERATIONS and final["global_step"] == 2048
    # The counts carried on from the checkpoint's: the fresh reset after resuming adds 4 observations.
    assert final["obs_rms"]["count"].item() == 4 * (1 + 512) + 4
    assert final["return_rms"]["count"].item() == 2048
    assert final["args"] == {**saved["args"], "resume": checkpoint_path}


def test_continuous_divergence_stops_and_keeps_the_last_good_checkpoint(continuous_interrupted, tmp_path):
    _, _, _, run_dir = continuous_interrupted
    good_path = os.path.join(run_dir, "checkpoint.pt")
    good = torch.load(good_path, weights_only=True)
    good["iteration"], good["global_step"] = 2, 512  # resume early so the run is not already over
    good["args"]["vector_mode"] = "sync"  # no subprocesses needed here
    ppo_continuous.save_checkpoint(good_path, good)
    digest = hashlib.sha256(open(good_path, "rb").read()).hexdigest()
    poisoned_path = str(tmp_path / "poisoned.pt")
    torch.save(dict(good, args={**good["args"], "learning_rate": 1e30}), poisoned_path)

    result = run_script("ppo_continuous_action", "--resume", poisoned_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert (
        f"non-finite loss or parameters at iteration 3 (global step 768); last good checkpoint: {good_path}" in result.stderr
    )
    assert hashlib.sha256(open(good_path, "rb").read()).hexdigest() == digest


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
