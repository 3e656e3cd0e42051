"""cleanrl/pqn_atari_envpool.py: its Q(lambda) targets on next-step rollouts (stale rows, terminations that include
life losses, truncations) against the brute-force forward view; learning on marked Pong frames (real EnvPool, the
observation, action and reward kept paired); evaluation of whole games; the epsilon schedule across a resumed
extension; bad input."""

import os

import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from helpers import assert_evaluates_whole_games_of_its_weights, only_run_dir, read_scalars, run_on_marked_frames, run_script
from q_lambda_reference import forward_view_returns

from cleanrl.pqn_atari_envpool import QNetwork, q_lambda_returns

SCRIPT = "pqn_atari_envpool"
TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/epsilon", "charts/learning_rate"}
TAGS |= {"losses/td_loss", "losses/q_values"}


def random_next_step_rollout(rng, num_steps, num_envs, prev_episode_over):
    """Rows as EnvPool returns them: after every boundary (termination, a life loss among them, or truncation) comes
    a stale row, never itself a boundary, whose reward is 0 and whose observation is the reset one."""
    terminated = np.zeros((num_steps, num_envs), bool)
    truncated = np.zeros((num_steps, num_envs), bool)
    rewards = rng.normal(size=(num_steps, num_envs))
    stale = np.zeros((num_steps, num_envs), bool)
    for env in range(num_envs):
        after_boundary = prev_episode_over[env]
        for t in range(num_steps):
            if after_boundary:
                stale[t, env], rewards[t, env], after_boundary = True, 0.0, False
                continue
            draw = rng.random()
            terminated[t, env] = draw < 0.08
            truncated[t, env] = 0.08 <= draw < 0.14 or (draw < 0.08 and rng.random() < 0.3)
            after_boundary = terminated[t, env] or truncated[t, env]
    return rewards, terminated, truncated, stale


@pytest.mark.parametrize("gamma,q_lambda", [(0.99, 0.65), (0.9, 1.0), (0.99, 0.0)])
def test_q_lambda_returns_on_next_step_rollouts_match_the_forward_view(gamma, q_lambda):
    """Valid rows get the forward view's target, where a truncation at row k bootstraps max Q of the observation
    EnvPool returned with it (values[k + 1], the episode's real last one); stale rows are masked and get 0."""
    rng = np.random.default_rng(11)
    num_steps, num_envs = 48, 6
    prev_episode_over = np.array([True, False, True, False, False, True])
    rewards, terminated, truncated, stale = random_next_step_rollout(rng, num_steps, num_envs, prev_episode_over)
    values = rng.normal(size=(num_steps + 1, num_envs)) * 3
    assert stale.sum() >= 15 and terminated.sum() >= 8 and (truncated & ~terminated).sum() >= 5
    as_tensor = lambda x: torch.as_tensor(x, dtype=torch.bool if x.dtype == bool else torch.float32)  # noqa: E731
    returns, valid = q_lambda_returns(
        *(as_tensor(x) for x in (values, rewards, terminated, truncated, prev_episode_over)), gamma=gamma, q_lambda=q_lambda
    )
    np.testing.assert_array_equal(valid.numpy(), ~stale)
    expected = forward_view_returns(values[1:], values[1:], rewards, terminated, truncated, gamma, q_lambda)
    np.testing.assert_allclose(returns.numpy()[~stale], expected[~stale], rtol=1e-5, atol=1e-5)
    assert (returns.numpy()[stale] == 0).all()


def test_the_loss_skips_stale_rows():
    torch.manual_seed(0)
    q_network = QNetwork(6)
    obs = torch.randint(0, 255, (4, 4, 84, 84), dtype=torch.uint8)
    actions, returns = torch.tensor([0, 3, 5, 1]), torch.tensor([1.0, -2.0, 100.0, 0.5])
    valid = torch.tensor([True, True, False, True])
    from cleanrl.pqn_atari_envpool import td_loss

    loss, q_mean = td_loss(q_network, obs, actions, returns, valid)
    with torch.no_grad():
        q_taken = q_network(obs)[torch.arange(4), actions]
    kept = [0, 1, 3]  # the stale row's target (100) would dominate a plain mean
    assert loss.item() == pytest.approx(((q_taken[kept] - returns[kept]) ** 2).mean().item(), rel=1e-5)
    assert q_mean.item() == pytest.approx(q_taken[kept].mean().item(), rel=1e-5, abs=1e-6)


# Marked Pong frames (tests/marked_frames.py): +1 for RIGHT on a white band, LEFT on a black one. Random play earns
# 64/6 = 10.7 in a 64-step game, a policy that ignores the band at most 32, one that reads it 64. 8 envs x 32 steps,
# 2 epochs of 4 minibatches, lr 1e-3, epsilon down to 0.01 over the first 1,024 steps, fp32 (as calibrated, on every
# CPU kind). Calibration, seeds 1, 2, 3 at 4,096 steps: first-8-game means 16.1, 12.8, 15.1; last-20-game means 63.7,
# 63.7, 63.4 (about 12 s each on the 2-core EPYC).
MARKED = ["--env-id", "Pong-v5", "--max-episode-steps", "64", "--total-timesteps", "4096", "--num-envs", "8"]
MARKED += ["--num-steps", "32", "--num-minibatches", "4", "--update-epochs", "2", "--exploration-fraction", "0.25"]
MARKED += ["--learning-rate", "1e-3", "--precision", "fp32"]


@pytest.fixture(scope="module")
def marked_run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("marked")
    result = run_on_marked_frames(SCRIPT, *MARKED, "--seed", "1", "--log-dir", str(log_dir), "--save-model")
    assert result.returncode == 0, result.stderr[-3000:]
    return only_run_dir(log_dir)


def test_learns_to_read_the_newest_frame(marked_run):
    scalars = read_scalars(marked_run)
    assert TAGS <= set(scalars), TAGS - set(scalars)
    returns = [value for _, value in scalars["charts/episodic_return"]]
    assert np.mean(returns[:8]) < 32, returns[:8]  # blind play first
    assert np.mean(returns[-20:]) > 48, returns[-20:]  # far above any policy that cannot see the band


def test_evaluation_plays_whole_games_of_the_saved_weights(marked_run, tmp_path):
    model = os.path.join(marked_run, f"{SCRIPT}.cleanrl_model")
    assert_evaluates_whole_games_of_its_weights(model, "q_head", action=2, tmp_dir=str(tmp_path))


SHORT = ["--env-id", "Breakout-v5", "--num-envs", "4", "--num-steps", "32", "--max-episode-steps", "100", "--seed", "2"]


def test_a_resumed_extension_keeps_the_epsilon_schedule(tmp_path):
    """A 1,024-step run exploring over all of it, resumed to 2,048: epsilon stays at --end-e after the resume (a
    schedule recomputed from the new total would climb back to 0.5), and the step counter continues."""
    result = run_script(
        SCRIPT, *SHORT, "--total-timesteps", "1024", "--exploration-fraction", "1.0", "--log-dir", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    result = run_script(SCRIPT, "--resume", os.path.join(run_dir, "checkpoint.pt"), "--total-timesteps", "2048")
    assert result.returncode == 0, result.stderr[-3000:]
    epsilons = read_scalars(run_dir)["charts/epsilon"]
    assert [step for step, _ in epsilons] == list(range(128, 2049, 128))
    expected = [max(1.0 - 0.99 * step / 1024, 0.01) for step, _ in epsilons]
    np.testing.assert_allclose([value for _, value in epsilons], expected, rtol=1e-5, atol=1e-6)


BAD_INPUT = [
    (["--q-lambda", "-0.1"], ["--q-lambda must be in [0, 1], got -0.1"]),
    (["--end-e", "1.5"], ["--end-e", "[0, 1]", "1.5"]),
    (["--exploration-fraction", "0"], ["--exploration-fraction", "(0, 1]"]),
    (["--max-grad-norm", "nan"], ["--max-grad-norm must be", "finite", "got nan"]),
    (["--env-id", "Hopper-v4"], ["MuJoCo", "Atari"]),
    (["--env-id", "Breakout-v4"], ["--env-id 'Breakout-v4'", "Breakout-v5"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3"]),
]
