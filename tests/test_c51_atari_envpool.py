"""cleanrl/c51_atari_envpool.py: the projection against the per-atom brute force (with the replay's boolean done
flags), the replay being dqn_atari_envpool.py's (whose rules tests/test_dqn_atari_envpool.py proves), learning on
marked Pong frames (real EnvPool), a resume that restores the buffer, bad input."""

import inspect

import numpy as np
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from c51_reference import brute_force_projection
from helpers import only_run_dir, read_scalars, run_on_marked_frames, run_script

import cleanrl.c51_atari_envpool as c51_atari
import cleanrl.dqn_atari_envpool as dqn_atari

SCRIPT = "c51_atari_envpool"
TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/epsilon"}
TAGS |= {"losses/td_loss", "losses/q_values"}


def test_projection_with_boolean_done_flags_matches_the_brute_force():
    rng = np.random.default_rng(5)
    batch, n_atoms, v_min, v_max = 32, 51, -10.0, 10.0
    next_pmfs = rng.dirichlet(np.ones(n_atoms), size=batch)
    rewards = rng.choice([-1.0, 0.0, 1.0], size=batch)  # clipped Atari rewards
    dones = rng.random(batch) < 0.4
    target = c51_atari.project_distribution(
        torch.as_tensor(next_pmfs, dtype=torch.float32),
        torch.as_tensor(rewards, dtype=torch.float32),
        torch.as_tensor(dones),  # the replay's flags are bool
        0.99,
        torch.linspace(v_min, v_max, n_atoms),
    ).numpy()
    expected = brute_force_projection(next_pmfs, rewards, dones, 0.99, v_min, v_max)
    np.testing.assert_allclose(target, expected, rtol=1e-5, atol=1e-5)


def test_the_replay_is_dqn_atari_envpools_whose_rules_are_proven_there():
    """The stale step is never stored, truncations keep their real last frame, frames are deduplicated: proven for
    dqn_atari_envpool.py's ReplayBuffer against per-game reconstructions. This script carries the same class, and the
    same call that feeds it."""
    assert inspect.getsource(c51_atari.ReplayBuffer) == inspect.getsource(dqn_atari.ReplayBuffer)
    feed = 'rb.add(actions, rewards, terminations, prev_episode_over, next_obs, infos["elapsed_step"] == 0)'
    assert feed in inspect.getsource(c51_atari) and feed in inspect.getsource(dqn_atari)


def test_q_values_are_the_means_of_the_distributions():
    torch.manual_seed(0)
    network = c51_atari.QNetwork(6, 51, -10.0, 10.0)
    obs = torch.randint(0, 255, (3, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        pmfs, q_values = network.pmfs(obs), network(obs)
    np.testing.assert_allclose(pmfs.sum(dim=2).numpy(), 1.0, rtol=1e-5)
    np.testing.assert_allclose(q_values.numpy(), (pmfs.numpy() * np.linspace(-10, 10, 51)).sum(axis=2), rtol=1e-5, atol=1e-5)


# Marked Pong frames (tests/marked_frames.py): +1 for RIGHT on a white band, LEFT on a black one. Random play earns
# 64/6 = 10.7 in a 64-step game, a policy that ignores the band at most 32, one that reads it 64. 4 envs, learning
# from step 1,000, epsilon at 0.01 from step 800, lr 1e-3, target copied every 500 steps, the support widened to
# [-10, 60] (a 64-step game of rewards 1 is worth up to about 47 discounted), fp32 and one thread (as calibrated, on
# every CPU kind). Calibration, seeds 1, 2, 3 at 4,000 steps: first-8-game means 7.3, 8.8, 6.6; last-20-game means
# 63.4, 63.6, 63.5 (about 35 s each on the 2-core EPYC). At 3,000 steps with the default support [-10, 10] and
# lr 2.5e-4, seed 1 reached only 38.6: the saturated support hides the value of the right action.
MARKED = ["--env-id", "Pong-v5", "--max-episode-steps", "64", "--total-timesteps", "4000", "--learning-starts", "1000"]
MARKED += ["--buffer-size", "4000", "--exploration-fraction", "0.2", "--num-envs", "4", "--precision", "fp32"]
MARKED += ["--target-network-frequency", "500", "--v-max", "60", "--learning-rate", "1e-3", "--torch-threads", "1"]


def test_learns_to_read_the_newest_frame(tmp_path):
    result = run_on_marked_frames(SCRIPT, *MARKED, "--seed", "1", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    scalars = read_scalars(only_run_dir(tmp_path))
    assert TAGS <= set(scalars), TAGS - set(scalars)
    returns = [value for _, value in scalars["charts/episodic_return"]]
    assert np.mean(returns[:8]) < 32, returns[:8]  # blind play first
    assert np.mean(returns[-20:]) > 48, returns[-20:]  # far above any policy that cannot see the band


SHORT = ["--env-id", "Breakout-v5", "--num-envs", "2", "--max-episode-steps", "200", "--learning-starts", "300"]
SHORT += ["--buffer-size", "2000", "--target-network-frequency", "200", "--torch-threads", "1", "--seed", "3"]
SHORT += ["--batch-size", "8"]  # not 32: the update is most of a run's time; the test counts steps and rows


def test_a_resume_restores_the_replay_buffer(tmp_path):
    result = run_script(SCRIPT, *SHORT, "--total-timesteps", "800", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    result = run_script(SCRIPT, "--resume", f"{run_dir}/checkpoint.pt", "--total-timesteps", "1600")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "replay buffer: 800 env steps restored" in result.stdout, result.stdout
    losses = read_scalars(run_dir)["losses/td_loss"]
    assert [step for step, _ in losses] == [1000] and np.isfinite(losses[0][1])


BAD_INPUT = [
    (["--n-atoms", "1"], ["--n-atoms must be in [2, 10000], got 1"]),
    (["--n-atoms", "100000000"], ["--n-atoms must be in [2, 10000], got 100000000"]),  # trial 5, P1: a traceback
    (["--v-min", "5", "--v-max", "5"], ["--v-min 5.0 and --v-max 5.0 must hold -1,000,000 <= v-min < v-max <= 1,000,000"]),
    (["--v-min", "-3e38", "--v-max", "3e38"], ["--v-min -3e+38 and --v-max 3e+38 must hold"]),  # trial 13, Q5
    (["--v-min", "5", "--v-max", "5.0000001"], ["too close for float32 at this scale"]),  # trial 14: atoms collapse
    (["--v-min", "-inf"], ["--v-min must be a finite number, got -inf"]),
    (["--env-id", "Hopper-v4"], ["MuJoCo", "Atari"]),
    (["--learning-starts", "20000", "--total-timesteps", "10000"], ["--learning-starts 20000", "10000"]),
    (["--buffer-size", "100000000"], ["replay buffer", "GiB", "--buffer-size"]),
]
