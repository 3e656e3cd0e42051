"""Tests of cleanrl/reinforce_continuous_action_envpool.py: the discounted returns against an episode-by-episode
brute force (boundaries, truncations, stale steps, the rollout edge), the return normalisation, the loss ignoring
stale rows, real short runs (determinism, resume), a learning run on InvertedPendulum and its saved-model
evaluation through the command line, bad input."""

import os
import shutil

import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from gae_reference import random_next_step_rollout
from helpers import evaluate_cli_returns, only_run_dir, read_scalars, run_script

from cleanrl.reinforce_continuous_action_envpool import (
    Agent,
    Args,
    RunningMeanStd,
    compute_returns,
    env_action,
    evaluation_player,
    normalize_obs,
    normalize_returns,
    reinforce_loss,
    validate_args,
)

SCRIPT = "reinforce_continuous_action_envpool"


def returns_reference(rewards, terminations, truncations, prev_episode_over, gamma):
    """Brute force, independent of the script's recursion: cut each env's rollout into episode pieces from the flags
    (a stale row, the one after a boundary, belongs to none), then G_t = sum_k gamma^(k - t) r_k over the rest of
    t's piece. A piece still running at the rollout's end sums what it has: nothing is bootstrapped anywhere."""
    num_steps, num_envs = rewards.shape
    returns, valid = np.zeros((num_steps, num_envs)), np.zeros((num_steps, num_envs), bool)
    for env in range(num_envs):
        pieces, current, previous_over = [], [], bool(prev_episode_over[env])
        for t in range(num_steps):
            if previous_over:
                previous_over = False
                continue
            valid[t, env] = True
            current.append(t)
            if terminations[t, env] or truncations[t, env]:
                pieces.append(current)
                current, previous_over = [], True
        pieces.append(current)  # the rollout edge cuts the last one (maybe empty)
        for piece in pieces:
            for i, t in enumerate(piece):
                returns[t, env] = sum(gamma**j * rewards[k, env] for j, k in enumerate(piece[i:]))
    return returns, valid


def returns_torch(rewards, terminations, truncations, prev_episode_over, gamma):
    returns, valid = compute_returns(
        torch.as_tensor(rewards, dtype=torch.float64),
        torch.as_tensor(terminations),
        torch.as_tensor(truncations),
        torch.as_tensor(prev_episode_over),
        gamma,
    )
    return returns.numpy(), valid.numpy()


@pytest.mark.parametrize("gamma", [0.99, 0.9, 1.0, 0.5])
def test_compute_returns_matches_brute_force_on_random_rollouts(gamma):
    rng = np.random.default_rng(int(gamma * 1000))
    for _ in range(200):
        num_steps, num_envs = int(rng.integers(1, 24)), int(rng.integers(1, 6))
        _, rewards, term, trunc, prev_over = random_next_step_rollout(
            rng, num_steps, num_envs, p_term=rng.uniform(0, 0.3), p_trunc=rng.uniform(0, 0.3)
        )
        rewards[np.roll(term | trunc, 1, axis=0)] = 0.0  # EnvPool pays 0 on stale rows (row 0 below)
        rewards[0, prev_over] = 0.0
        expected, expected_valid = returns_reference(rewards, term, trunc, prev_over, gamma)
        returns, valid = returns_torch(rewards, term, trunc, prev_over, gamma)
        np.testing.assert_array_equal(valid, expected_valid)
        np.testing.assert_allclose(returns[valid], expected[valid], rtol=1e-10, atol=1e-10)
        assert (returns[~valid] == 0).all()


def test_compute_returns_by_hand_truncation_stale_row_and_rollout_edge():
    """One env, gamma 0.5: a truncation bootstraps nothing, the stale row after it is masked and leaks nothing into
    the truncated episode, and the unfinished episode at the rollout edge sums only the rewards seen."""
    rewards = np.array([[1.0], [2.0], [0.0], [4.0], [8.0]])
    trunc = np.array([[False], [True], [False], [False], [False]])
    returns, valid = returns_torch(rewards, np.zeros_like(trunc), trunc, np.array([False]), 0.5)
    np.testing.assert_array_equal(valid[:, 0], [True, True, False, True, True])
    np.testing.assert_allclose(returns[:, 0], [1 + 0.5 * 2, 2, 0, 4 + 0.5 * 8, 8])
    # the same rows with the first row stale (the previous rollout ended an episode)
    returns, valid = returns_torch(rewards, np.zeros_like(trunc), trunc, np.array([True]), 0.5)
    assert not valid[0, 0] and returns[0, 0] == 0 and returns[1, 0] == 2


def test_normalize_returns_uses_the_earlier_batches_and_skips_stale_rows():
    rng = np.random.default_rng(0)
    rms = RunningMeanStd(())
    first, second = torch.tensor(rng.normal(5, 3, 40)), torch.tensor(rng.normal(7, 2, 40))
    valid = torch.tensor(rng.random(40) > 0.2)
    out = normalize_returns(first, valid, rms)
    torch.testing.assert_close(out, first * valid)  # no statistics yet: mean 0, var 1
    assert rms.count == int(valid.sum()) and rms.mean == pytest.approx(first[valid].mean().item())
    mean, std = first[valid].mean().item(), np.sqrt(first[valid].var(unbiased=False).item() + 1e-8)
    out = normalize_returns(second, valid, rms)
    torch.testing.assert_close(out, (second - mean) / std * valid)
    both = torch.cat([first[valid], second[valid]]).numpy()
    assert rms.mean == pytest.approx(both.mean()) and rms.var == pytest.approx(both.var())


def test_loss_ignores_stale_rows_and_is_the_score_function():
    torch.manual_seed(0)
    agent = Agent(11, 3)
    obs, actions, returns = torch.randn(64, 11), torch.randn(64, 3), torch.randn(64)
    valid = torch.rand(64) > 0.3

    def loss_and_grads(obs, actions, returns):
        agent.zero_grad()
        loss, stats = reinforce_loss(agent, obs, actions, returns, valid)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in agent.parameters()], stats

    base_loss, base_grads, base_stats = loss_and_grads(obs, actions, returns)
    n = int((~valid).sum())
    changed = [x.clone() for x in (obs, actions, returns)]
    changed[0][~valid], changed[1][~valid], changed[2][~valid] = torch.randn(n, 11) * 100, torch.randn(n, 3) * 10, 1e3
    loss, grads, stats = loss_and_grads(*changed)
    torch.testing.assert_close(loss, base_loss)
    for g, g0 in zip(grads, base_grads):
        torch.testing.assert_close(g, g0)
    torch.testing.assert_close(stats["entropy"], base_stats["entropy"])
    with torch.no_grad():
        _, logprob, _ = agent.get_action(obs, actions)
    torch.testing.assert_close(base_loss, -(logprob * returns)[valid].mean())
    assert agent.actor_logstd.detach().eq(-0.5).all()  # Tianshou's initial log-std
    assert not hasattr(agent, "critic")


SHORT_RUN = ["--env-id", "HalfCheetah-v4", "--num-envs", "4", "--num-steps", "64", "--max-episode-steps", "50"]


@pytest.fixture(scope="module")
def two_short_runs(tmp_path_factory):
    """The same seeded short HalfCheetah run (2 iterations, 50-step time limit so episodes end) twice."""
    dirs = []
    for i in range(2):
        log_dir = tmp_path_factory.mktemp(f"cheetah{i}")
        result = run_script(SCRIPT, *SHORT_RUN, "--total-timesteps", "512", "--seed", "5", "--log-dir", str(log_dir))
        assert result.returncode == 0, result.stderr[-3000:]
        dirs.append(only_run_dir(log_dir))
    return dirs


def test_same_seed_gives_identical_losses(two_short_runs):
    first, second = (read_scalars(d) for d in two_short_runs)
    assert {"losses/policy_loss", "losses/entropy", "charts/episodic_return", "charts/learning_rate"} <= set(first)
    assert len(first["losses/policy_loss"]) == 2
    for tag in sorted(set(first) - {"charts/SPS"}):
        assert first[tag] == second[tag], tag


def test_resume_continues_step_counter_and_normalisers(two_short_runs, tmp_path):
    """The finished run's final checkpoint, resumed (in a copy of its folder) with a larger --total-timesteps: the
    step counter and the lr schedule continue, and the saved normalisers keep counting."""
    run_dir = str(shutil.copytree(two_short_runs[0], tmp_path / "run"))
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    before = torch.load(checkpoint_path, weights_only=True)
    assert before["iteration"] == 2 and before["global_step"] == 512
    assert before["obs_rms"]["count"] == 4 * (2 * 64 + 1)  # the reset batch and one batch per step
    result = run_script(SCRIPT, "--resume", checkpoint_path, "--total-timesteps", "1024")
    assert result.returncode == 0, result.stderr[-3000:]
    after = torch.load(checkpoint_path, weights_only=True)
    assert after["iteration"] == 4 and after["global_step"] == 1024
    assert after["obs_rms"]["count"] == before["obs_rms"]["count"] + 4 * (2 * 64 + 1)  # carried on, a new reset
    assert after["return_rms"]["count"] > before["return_rms"]["count"] > 0
    steps = [step for step, _ in read_scalars(run_dir)["losses/policy_loss"]]
    assert steps == [256, 512, 768, 1024], steps
    lrs = [value for _, value in read_scalars(run_dir)["charts/learning_rate"]]
    np.testing.assert_allclose(lrs[2:], [1e-3 * (1 - 2 / 4), 1e-3 * (1 - 3 / 4)], rtol=1e-6)


def test_env_action_clips_or_squashes_each_element_onto_the_bounds():
    """Against a per-element brute force: tanh maps a sample a to low + (tanh(a) + 1) / 2 * (high - low), strictly
    inside the bounds and monotone; clip saturates."""
    import math

    rng = np.random.default_rng(0)
    action = rng.normal(0, 3, size=(5, 4))
    low, high = np.array([-1.0, -0.4, 0.0, -2.0]), np.array([1.0, 0.4, 3.0, 1.0])
    squashed, clipped = env_action(action, low, high, "tanh"), env_action(action, low, high, "clip")
    for i, j in np.ndindex(action.shape):
        a, lo, hi = action[i, j], low[j], high[j]
        assert squashed[i, j] == pytest.approx(lo + (math.tanh(a) + 1) / 2 * (hi - lo), rel=1e-12)
        assert clipped[i, j] == min(max(a, lo), hi)
    assert np.all((squashed > low) & (squashed < high)) and (clipped == low).any() and (clipped == high).any()


@pytest.mark.parametrize("bound", ["clip", "tanh"])
def test_evaluation_plays_the_bound_the_model_trained_with(bound):
    """The saved --action-bound reaches the evaluator: its greedy action is the mean bounded the same way (a mean
    pushed far past the bounds, where clip and tanh differ)."""
    args = Args(env_id="Hopper-v4", action_bound=bound)
    agent = Agent(11, 3)
    with torch.no_grad():
        agent.actor_mean[-1].bias.copy_(torch.tensor([3.0, -3.0, 0.5]))
    obs_rms = RunningMeanStd((11,))
    saved = {"args": vars(args), "model_state_dict": agent.state_dict(), "obs_rms": obs_rms.state_dict()}
    player = evaluation_player(saved, num_envs=1, seed=0, device=torch.device("cpu"), greedy=True, epsilon=0.0, render=False)
    obs, _ = player.envs.reset()
    with torch.no_grad():
        mean = agent.actor_mean(torch.as_tensor(normalize_obs(obs, obs_rms, args.obs_clip))).numpy()
    low, high = player.envs.single_action_space.low, player.envs.single_action_space.high
    expected = np.clip(mean, low, high) if bound == "clip" else low + (np.tanh(mean) + 1) / 2 * (high - low)
    np.testing.assert_allclose(player.act(obs), expected, rtol=1e-5, atol=1e-6)
    player.envs.close()


def test_a_tanh_run_trains_and_keeps_its_bound_on_resume(two_short_runs, tmp_path):
    """The same seeded run as `two_short_runs` with --action-bound tanh: its env got other actions (other returns
    from the first episode on, where the policy is the same), it saves the bound, and a resume cannot change it."""
    flags = [*SHORT_RUN, "--total-timesteps", "512", "--seed", "5", "--action-bound", "tanh", "--log-dir", str(tmp_path)]
    result = run_script(SCRIPT, *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    squashed, clipped = (read_scalars(d)["charts/episodic_return"] for d in (only_run_dir(tmp_path), two_short_runs[0]))
    assert len(squashed) == len(clipped) and squashed[0][0] == clipped[0][0] and squashed[0][1] != clipped[0][1]
    checkpoint_path = os.path.join(only_run_dir(tmp_path), "checkpoint.pt")
    assert torch.load(checkpoint_path, weights_only=True)["args"]["action_bound"] == "tanh"
    result = run_script(SCRIPT, "--resume", checkpoint_path, "--total-timesteps", "1024", "--action-bound", "clip")
    assert result.returncode != 0 and "--action-bound clip (saved: tanh) cannot change on --resume" in result.stderr


# 150 iterations. Calibration, last-20 training-episode means at this budget: seed 1 960.0, seed 2 908.7, seed 3 980.7
# (`cleanrl/reinforce_continuous_action_envpool.py --env-id InvertedPendulum-v4 --total-timesteps 307500 --seed S`).
LEARNING_RUN = ["--env-id", "InvertedPendulum-v4", "--total-timesteps", "307500", "--seed", "1"]
THRESHOLD = 700.0


def test_inverted_pendulum_learns(pendulum_run):
    returns = [value for _, value in read_scalars(pendulum_run)["charts/episodic_return"]]
    assert np.mean(returns[:20]) < 50, returns[:20]
    final = np.mean(returns[-20:])
    assert final >= THRESHOLD, (final, returns[-40:])


EVAL_FLAGS = ["--no-cuda", "--torch-threads", "1"]


def test_saved_model_evaluates_from_the_command_line(pendulum_run):
    model_path = os.path.join(pendulum_run, f"{SCRIPT}.cleanrl_model")
    saved = torch.load(model_path, weights_only=True)
    assert saved["script"] == SCRIPT and {"model_state_dict", "args", "obs_rms", "return_rms"} <= set(saved)
    assert len(evaluate_cli_returns(model_path, "--episodes", "2", *EVAL_FLAGS)) == 2


BAD_INPUT = [
    (["--env-id", "HalfCheetah-v9"], ["'HalfCheetah-v9'", "HalfCheetah-v4"]),
    (["--num-envs", "0"], ["--num-envs", "0"]),
    (["--total-timesteps", "100"], ["--total-timesteps 100"]),
]


@pytest.mark.parametrize(
    "overrides,expected",
    [
        ({"learning_rate": 0.0}, ["--learning-rate", "0"]),
        ({"gamma": 1.5}, ["--gamma", "1.5"]),
        ({"obs_clip": -1.0}, ["--obs-clip", "-1"]),
        ({"max_episode_steps": 0}, ["--max-episode-steps", "0"]),
        ({"num_steps": 1}, ["--num-steps must be >= 2", "got 1"]),  # was: trained on lone rewards and exited 0
        # trial 31: the std exp(1e12) diverged at the first update, and the line blamed --learning-rate
        ({"init_logstd": 1e12}, ["--init-logstd must be in [-10, 5]", "got 1000000000000.0"]),
        ({"init_logstd": float("nan")}, ["--init-logstd must be a finite number", "got nan"]),
    ],
)
def test_validate_args_names_the_bad_value(overrides, expected):
    with pytest.raises(SystemExit) as error:
        validate_args(Args(**overrides))
    message = str(error.value.code)
    assert message.startswith("error: ") and "\n" not in message
    for fragment in expected:
        assert fragment in message, (fragment, message)
    validate_args(Args())  # the defaults pass


def test_the_jax_address_space_floor_is_not_applied_to_a_torch_script_that_imports_envpool():
    """EnvPool imports jax, so "jax" in sys.modules would hold for this torch script too: under a 2 GB limit (below
    the JAX scripts' 2,929 MiB, above what this one needs) its checks go on to the budget's own line."""
    import resource
    import subprocess
    import sys

    from helpers import REPO, assert_one_error_line

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2_000_000 * 1024, resource.RLIM_INFINITY))

    command = [sys.executable, os.path.join(REPO, "cleanrl", f"{SCRIPT}.py"), "--total-timesteps", "100"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, preexec_fn=limit, timeout=300)
    assert_one_error_line(result, ["--total-timesteps 100"])


@pytest.mark.parametrize("limit_kib, mib", [(1_000_000, "976"), (1_300_000, "1,269")])
@pytest.mark.parametrize("script", [SCRIPT, "sac_continuous_action_envpool", "td3_continuous_action_envpool"])
def test_an_envpool_mujoco_script_under_its_address_space_floor_is_one_line(tmp_path, script, limit_kib, mib):
    """Trial 17, U7: between the 600 MiB floor and about 1.4 GB, MuJoCo's and EnvPool's threads failed where no Python
    code hears it: std::bad_alloc (exit 134), glibc's "cannot allocate memory for thread-local data: ABORT" with the
    run folder left, or a hang after a thread's MemoryError; trial 18, V3: at 1,000,000 torch's import after EnvPool's
    aborted before any check ran. Below MUJOCO_ENVPOOL_ADDRESS_SPACE: one line, before the libraries load, no folder."""
    import resource
    import subprocess
    import sys

    from helpers import REPO, assert_one_error_line

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_kib * 1024, resource.RLIM_INFINITY))

    command = [sys.executable, os.path.join(REPO, "cleanrl", f"{script}.py"), "--torch-threads", "1"]
    command += ["--log-dir", str(tmp_path / "runs")]
    if script == SCRIPT:
        command += ["--total-timesteps", "4100"]
    else:
        command += ["--total-timesteps", "400", "--learning-starts", "200", "--buffer-size", "1000"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, preexec_fn=limit, timeout=120)
    assert_one_error_line(result, [f"may map {mib} MiB (ulimit -v), less than the 1,464 MiB an EnvPool MuJoCo script"])
    assert not (tmp_path / "runs").exists()
