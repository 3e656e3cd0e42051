"""Tests of cleanrl/ppo.py (same-step autoreset on Gymnasium vector envs): GAE against brute force,
the script's truncation bootstrap on a real Gymnasium truncation, the same trajectory in next-step
and same-step form giving the same advantages, Gymnasium's same-step semantics and episode
statistics checked for real, a CartPole learning run, the saved model evaluated, determinism,
sync == async, bad input, and what a new user's adversarial trial broke (issue 16)."""

import importlib.util
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from gae_reference import next_step_reference, random_same_step_rollout, same_step_reference
from helpers import (
    ATARI_TAGS,
    REPO,
    decoded_video,
    evaluate_cli_returns,
    only_run_dir,
    read_scalars,
    run_script,
)

from cleanrl.ppo import Agent, Args, compute_gae_same_step, make_env, ppo_loss, truncation_values
from cleanrl.ppo_atari_envpool import compute_gae as compute_gae_next_step

SCRIPT = "ppo"


def gae_same_step(values, last_values, final_values, rewards, terminations, truncations, gamma=0.99, gae_lambda=0.95):
    """The script's GAE (the next-values wiring included), in float64."""
    as64 = lambda x: torch.as_tensor(np.asarray(x, np.float64))  # noqa: E731
    advantages = compute_gae_same_step(
        as64(values),
        as64(last_values),
        as64(final_values),
        as64(rewards),
        torch.as_tensor(terminations),
        torch.as_tensor(truncations),
        gamma,
        gae_lambda,
    )
    return advantages.numpy()


@pytest.mark.parametrize("gamma,gae_lambda", [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0), (0.97, 0.5)])
def test_compute_gae_same_step_matches_brute_force(gamma, gae_lambda):
    rng = np.random.default_rng(int(gamma * 1000 + gae_lambda * 100))
    truncated_rows = both_flags = 0
    for _ in range(200):
        num_steps, num_envs = int(rng.integers(1, 24)), int(rng.integers(1, 6))
        rollout = random_same_step_rollout(rng, num_steps, num_envs, p_term=rng.uniform(0, 0.3), p_trunc=rng.uniform(0, 0.3))
        expected = same_step_reference(*rollout, gamma, gae_lambda)
        np.testing.assert_allclose(gae_same_step(*rollout, gamma, gae_lambda), expected, rtol=1e-10, atol=1e-10)
        terminations, truncations = rollout[-2], rollout[-1]
        truncated_rows += int((truncations & ~terminations).sum())
        both_flags += int((truncations & terminations).sum())
    assert truncated_rows > 200 and both_flags > 10


def test_compute_gae_same_step_hand_cases():
    """Truncation bootstraps V(final obs), not the next row's V(reset obs); termination bootstraps 0
    (also with both flags); a boundary on the last row ignores V(obs after the rollout)."""
    gamma, lam = 0.9, 0.8
    values = np.array([[1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    last_values = np.array([3.0, 3.0, 3.0, 3.0])
    final_values = np.full((2, 4), 7.0)
    rewards = np.array([[0.5, 0.5, 0.5, 0.5], [1.0, 1.0, 1.0, 1.0]])
    term = np.array([[False, True, False, True], [False, False, True, False]])
    trunc = np.array([[True, False, False, True], [False, False, True, False]])
    adv = gae_same_step(values, last_values, final_values, rewards, term, trunc, gamma, lam)
    # env 0: row 0 truncates -> 0.5 + 0.9 * 7 - 1, no flow from row 1; row 1 bootstraps last_values
    assert adv[0, 0] == pytest.approx(0.5 + gamma * 7.0 - 1.0)
    assert adv[1, 0] == pytest.approx(1.0 + gamma * 3.0 - 2.0)
    # env 1: row 0 terminates -> 0.5 - 1
    assert adv[0, 1] == pytest.approx(0.5 - 1.0)
    # env 2: row 1 terminated and truncated -> bootstrap 0; row 0 continues into it
    d1 = 1.0 - 2.0
    assert adv[1, 2] == pytest.approx(d1)
    assert adv[0, 2] == pytest.approx(0.5 + gamma * 2.0 - 1.0 + gamma * lam * d1)
    # env 3: both flags on row 0 -> termination wins
    assert adv[0, 3] == pytest.approx(0.5 - 1.0)


def test_final_obs_value_is_read_on_truncated_rows_only():
    rng = np.random.default_rng(3)
    for _ in range(20):
        values, last_values, final_values, rewards, term, trunc = random_same_step_rollout(rng, 12, 3, 0.15, 0.15)
        base = gae_same_step(values, last_values, final_values, rewards, term, trunc)
        for t, env in np.ndindex(term.shape):
            changed = final_values.copy()
            changed[t, env] += 10.0
            adv = gae_same_step(values, last_values, changed, rewards, term, trunc)
            if trunc[t, env] and not term[t, env]:
                assert adv[t, env] == pytest.approx(base[t, env] + 0.99 * 10.0)
            else:
                np.testing.assert_array_equal(adv, base)


def test_truncation_bootstraps_the_value_of_the_real_final_observation():
    """The script's own wiring on real CartPole with a 20-step limit: truncation_values on every step
    (what the loop calls), then compute_gae_same_step. Each sub-env is replayed on a plain env with
    the same seed, so the real last observation of every episode is known independently of
    info["final_obs"]; the brute-force reference bootstraps its value at truncations. A wiring
    that bootstrapped 0, or V(reset obs), there gives other advantages, and the test shows it."""
    num_envs, seed, limit, num_steps = 3, 2, 20, 120
    torch.manual_seed(0)
    agent = Agent(4, 2)
    value_of = lambda obs: agent.get_value(torch.as_tensor(np.asarray(obs), dtype=torch.float32)).detach().numpy()  # noqa: E731
    envs = make_env("CartPole-v1", num_envs, "sync", max_episode_steps=limit)
    singles = [gym.make("CartPole-v1", max_episode_steps=limit) for _ in range(num_envs)]
    obs, _ = envs.reset(seed=seed)
    for i, env in enumerate(singles):
        env.reset(seed=seed + i)
    rng = np.random.default_rng(0)
    values, rewards, terms, truncs, final_values = [], [], [], [], []
    real_final_values = np.zeros((num_steps, num_envs))
    for t in range(num_steps):
        values.append(value_of(obs))
        action = rng.integers(0, 2, num_envs)
        obs, reward, term, trunc, info = envs.step(action)
        final_values.append(truncation_values(agent, info, term, trunc).numpy())
        for i, env in enumerate(singles):
            last_obs, _, _, _, _ = env.step(int(action[i]))
            if term[i] or trunc[i]:
                real_final_values[t, i] = value_of(last_obs[None])[0]
                env.reset()
        rewards.append(reward)
        terms.append(term)
        truncs.append(trunc)
    last_values = value_of(obs)
    envs.close()
    values, rewards, terms, truncs = (np.array(x) for x in (values, rewards, terms, truncs))
    truncated = truncs & ~terms
    assert truncated.sum() >= 5 and terms.sum() >= 5, (truncated.sum(), terms.sum())
    final_values = np.array(final_values)
    np.testing.assert_allclose(final_values[truncated], real_final_values[truncated], rtol=1e-5, atol=1e-6)
    assert (final_values[~truncated] == 0).all()

    advantages = gae_same_step(values, last_values, final_values, rewards, terms, truncs)
    expected = same_step_reference(values, last_values, real_final_values, rewards, terms, truncs, 0.99, 0.95)
    np.testing.assert_allclose(advantages, expected, rtol=1e-5, atol=1e-5)
    # what the two classic mistakes would give, at the truncated rows
    reset_values = np.concatenate([values[1:], last_values[None]])  # V(reset obs) after a truncation
    for wrong in (np.zeros_like(real_final_values), reset_values):
        wrong_advantages = same_step_reference(values, last_values, wrong, rewards, terms, truncs, 0.99, 0.95)
        assert np.abs(wrong_advantages - advantages)[truncated].min() > 1e-3
    # and the training loop calls this very wiring
    source = open(os.path.join(REPO, "cleanrl", f"{SCRIPT}.py")).read()
    assert "final_values[step] = truncation_values(agent, info, term, trunc)" in source
    assert "values, last_values, final_values, rewards, terminations, truncations, args.gamma" in source


def one_trajectory_in_both_forms(rng, num_transitions, p_term, p_trunc, start_stale):
    """One env's underlying trajectory: transitions k with V(s_k), r_k and an end flag; a boundary
    transition has its final observation's value V(final_k), and s_{k+1} is the next episode's reset
    state. Returned as a same-step rollout (one row per transition) and as a next-step rollout (a
    stale row after every boundary: its observation is the final one, its reward and action are
    ignored, and its own row is never a boundary)."""
    state_values = rng.normal(size=num_transitions + 1)  # V(s_0) .. V(s_K)
    rewards = rng.normal(size=num_transitions)
    flags = rng.random(num_transitions)
    terminated = flags < p_term
    truncated = (flags >= p_term) & (flags < p_term + p_trunc)
    truncated |= terminated & (rng.random(num_transitions) < 0.2)  # both flags sometimes
    final_values = rng.normal(size=num_transitions) * 3.0
    over = terminated | truncated

    same = dict(
        values=state_values[:-1, None],
        last_values=state_values[-1:],
        final_values=final_values[:, None],
        rewards=rewards[:, None],
        terminations=terminated[:, None],
        truncations=truncated[:, None],
    )

    values, rows_rewards, rows_term, rows_trunc = [], [], [], []
    if start_stale:  # the previous rollout ended on a boundary: its stale step opens this one
        values.append(rng.normal())
        rows_rewards.append(rng.normal())
        rows_term.append(False)
        rows_trunc.append(False)
    for k in range(num_transitions):
        values.append(state_values[k])
        rows_rewards.append(rewards[k])
        rows_term.append(terminated[k])
        rows_trunc.append(truncated[k])
        if over[k] and k + 1 < num_transitions:
            values.append(final_values[k])  # V(obs stored on the stale row) = V(final obs)
            rows_rewards.append(rng.normal())  # ignored
            rows_term.append(False)
            rows_trunc.append(False)
    # V(obs after the rollout): the final obs after a boundary, else s_K
    values.append(final_values[-1] if over[-1] else state_values[-1])
    column = lambda x, dtype=np.float64: np.asarray(x, dtype)[:, None]  # noqa: E731
    nxt = dict(
        values=column(values),
        rewards=column(rows_rewards),
        terminations=column(rows_term, bool),
        truncations=column(rows_trunc, bool),
        prev_episode_over=np.array([start_stale]),
    )
    return same, nxt


@pytest.mark.parametrize("gamma,gae_lambda", [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0)])
def test_same_trajectory_gives_same_advantages_in_next_step_and_same_step_form(gamma, gae_lambda):
    """The two GAE paths (next-step: cleanrl.ppo_atari_envpool.compute_gae with its valid mask;
    same-step: this script's) agree on every valid step of one underlying trajectory, and the
    brute-force next-step reference agrees too."""
    rng = np.random.default_rng(11)
    boundaries = 0
    for _ in range(300):
        num_transitions = int(rng.integers(1, 30))
        same, nxt = one_trajectory_in_both_forms(
            rng, num_transitions, rng.uniform(0, 0.25), rng.uniform(0, 0.25), rng.random() < 0.3
        )
        same_adv = gae_same_step(**same, gamma=gamma, gae_lambda=gae_lambda)
        next_adv, valid = compute_gae_next_step(
            *(torch.as_tensor(nxt[key]) for key in ("values", "rewards", "terminations", "truncations", "prev_episode_over")),
            gamma,
            gae_lambda,
        )
        next_adv, valid = next_adv.numpy(), valid.numpy()
        assert valid.sum() == num_transitions
        np.testing.assert_allclose(next_adv[valid], same_adv[:, 0], rtol=1e-10, atol=1e-10)
        reference, reference_valid = next_step_reference(**nxt, gamma=gamma, gae_lambda=gae_lambda)
        np.testing.assert_array_equal(reference_valid, valid)
        np.testing.assert_allclose(reference[valid], same_adv[:, 0], rtol=1e-10, atol=1e-10)
        boundaries += int((same["terminations"] | same["truncations"]).sum())
    assert boundaries > 500


@pytest.mark.parametrize("vector_mode", ["sync", "async"])
def test_gymnasium_same_step_semantics_and_episode_statistics(vector_mode):
    """Real CartPole under make_env, with a 25-step limit so truncations happen. Replayed action by
    action on plain single envs with the same seeds: at a boundary, the returned observation is
    already the reset one, info["final_obs"] is the episode's last one, and every step counts. The
    installed RecordEpisodeStatistics reports exactly the manually counted returns and lengths in
    same-step mode (older Gymnasium releases started counting one step late there)."""
    num_envs, seed, limit = 3, 5, 25
    envs = make_env("CartPole-v1", num_envs, vector_mode, max_episode_steps=limit)
    singles = [gym.make("CartPole-v1", max_episode_steps=limit) for _ in range(num_envs)]
    obs, _ = envs.reset(seed=seed)
    single_obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(singles)]
    np.testing.assert_array_equal(obs, np.stack(single_obs))
    rng = np.random.default_rng(0)
    returns, lengths = np.zeros(num_envs), np.zeros(num_envs, dtype=int)
    counts = {"terminated": 0, "truncated": 0}
    for _ in range(300):
        action = rng.integers(0, 2, num_envs)
        obs, reward, term, trunc, info = envs.step(action)
        returns += reward
        lengths += 1
        over = term | trunc
        for i, env in enumerate(singles):
            s_obs, s_reward, s_term, s_trunc, _ = env.step(int(action[i]))
            assert (s_reward, s_term, s_trunc) == (reward[i], term[i], trunc[i])
            if over[i]:
                np.testing.assert_array_equal(info["final_obs"][i], s_obs)
                s_obs, _ = env.reset()
            np.testing.assert_array_equal(obs[i], s_obs)
        if over.any():
            np.testing.assert_array_equal(info["_final_obs"], over)
            np.testing.assert_array_equal(info["_episode"], over)
            np.testing.assert_array_equal(info["episode"]["r"][over], returns[over])
            np.testing.assert_array_equal(info["episode"]["l"][over], lengths[over])
            counts["terminated"] += int(term.sum())
            counts["truncated"] += int(trunc.sum())
            returns[over], lengths[over] = 0.0, 0
        else:
            assert "episode" not in info and "final_obs" not in info
    envs.close()
    assert counts["terminated"] > 10 and counts["truncated"] > 5, counts


def test_loss_at_the_old_policy():
    """Before any update the ratio is 1: no KL, nothing clipped, policy loss = -mean(norm. adv) = 0."""
    torch.manual_seed(0)
    agent = Agent(4, 2)
    obs = torch.randn(64, 4)
    with torch.no_grad():
        actions, logprobs, _, values = agent.get_action_and_value(obs)
    loss, stats = ppo_loss(agent, obs, actions, logprobs, torch.randn(64), torch.randn(64), values, Args())
    assert stats["approx_kl"].abs() < 1e-6 and stats["clipfrac"] == 0
    assert stats["policy_loss"].abs() < 1e-6
    loss.backward()
    assert all(p.grad is not None for p in agent.parameters())


# CleanRL's classic-control defaults as they are, on 300k steps instead of 500k (the learning rate
# anneals to 0 over the run). Seeds 1-5 ended with last-20 means of 500, 500, 487, 500 and 500
# (benchmark/ppo.sh), first reaching 475 at 176k, 151k, 193k, 198k and 93k steps.
LEARN = ["--env-id", "CartPole-v1", "--total-timesteps", "300000"]


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("cartpole")
    result = run_script(SCRIPT, *LEARN, "--seed", "1", "--log-dir", str(log_dir), "--save-model", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return only_run_dir(log_dir)


def test_cartpole_learns(cartpole_run):
    scalars = read_scalars(cartpole_run)
    missing = ATARI_TAGS - set(scalars)
    assert not missing, missing
    returns = [value for _, value in scalars["charts/episodic_return"]]
    lengths = [value for _, value in scalars["charts/episodic_length"]]
    assert returns == lengths  # CartPole pays 1 per step
    assert np.mean(returns[:20]) < 100  # it starts from scratch
    assert np.mean(returns[-20:]) >= 475, returns[-20:]


def test_saved_model_evaluates(cartpole_run):
    from cleanrl_utils.evaluate import evaluate

    model_path = os.path.join(cartpole_run, f"{SCRIPT}.cleanrl_model")
    checkpoint = torch.load(model_path, weights_only=True)
    assert checkpoint["script"] == SCRIPT and checkpoint["args"]["env_id"] == "CartPole-v1"
    returns = evaluate(model_path, episodes=3, seed=1, greedy=True)
    assert len(returns) == 3
    assert np.mean(returns) >= 400, returns  # the trained policy, not a fresh one (~20)


def test_evaluate_cli_reports_per_episode_returns(cartpole_run):
    model_path = os.path.join(cartpole_run, f"{SCRIPT}.cleanrl_model")
    assert len(evaluate_cli_returns(model_path, "--episodes", "2")) == 2


SHORT_RUN = ["--env-id", "Acrobot-v1", "--total-timesteps", "2048", "--max-episode-steps", "60", "--seed", "4"]


def test_same_seed_gives_identical_losses_and_async_matches_sync(tmp_path):
    """A short Acrobot run (60-step limit: truncations) twice under sync and once under async."""
    scalars = []
    for i, mode in enumerate(["sync", "sync", "async"]):
        log_dir = tmp_path / f"run{i}"
        result = run_script(SCRIPT, *SHORT_RUN, "--vector-mode", mode, "--log-dir", str(log_dir))
        assert result.returncode == 0, result.stderr[-3000:]
        scalars.append(read_scalars(only_run_dir(log_dir)))
    assert all(length == 60 for _, length in scalars[0]["charts/episodic_length"])
    assert len(scalars[0]["charts/episodic_length"]) == 4 * 8  # 512 steps per env, 8 episodes each
    for tag in sorted(ATARI_TAGS - {"charts/SPS"}):
        assert scalars[0][tag] == scalars[1][tag], tag
        assert scalars[0][tag] == scalars[2][tag], tag


BAD_INPUT = [
    (["--env-id", "Hoper-v4"], ["'Hoper-v4'", "; e.g. CartPole-v1"]),  # trial 31: was "did you mean Hopper-v4, Hopper-v5?"
    (["--env-id", "Pong-v5"], ["'Pong-v5' is an EnvPool Atari id", "_envpool"]),  # was: "did you mean Ant-v5?"
    (["--env-id", "CartPol-v1"], ["'CartPol-v1'", "CartPole-v1"]),
    (["--torch-threads", "100000"], ["--torch-threads must be in 0..", "got 100000"]),  # trial 11 N4: a segfault
    (["--env-id", "Pendulum-v1"], ["'Pendulum-v1'", "discrete"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3", "512"]),
    (["--num-envs", "0"], ["--num-envs", "0"]),
    (["--num-steps", "-5"], ["--num-steps", "-5"]),
    (["--total-timesteps", "100"], ["--total-timesteps 100"]),
    (["--learning-rate", "0"], ["--learning-rate", "0"]),
    (["--vector-mode", "threads"], ["--vector-mode", "'threads'"]),
    (["--max-episode-steps", "-1"], ["--max-episode-steps", "-1"]),
    (["--max-episode-steps", "0"], ["--max-episode-steps must be a positive integer, got 0"]),
    (["--checkpoint-every", "-1"], ["--checkpoint-every", "-1"]),
    (
        ["--learning-rate", "nan"],
        ["--learning-rate must be", "finite", "got nan"],
    ),  # was: Adam's ValueError, and an empty run folder left behind
    (
        ["--clip-coef", "-0.2"],
        ["--clip-coef must be", "finite", "got -0.2"],
    ),  # was: trained with clamp(ratio, 1.2, 0.8) and exited 0
    (["--capture-video", "--video-every", "0"], ["--video-every must be a positive integer, got 0"]),
]


@pytest.mark.skipif(importlib.util.find_spec("Box2D") is not None, reason="Box2D is installed: LunarLander-v3 runs")
def test_lunar_lander_without_box2d_gives_one_clear_line():
    result = run_script(SCRIPT, "--env-id", "LunarLander-v3", timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "'LunarLander-v3'" in lines[0] and "not installed" in lines[0], result.stderr


# ---- what a new user's adversarial trial broke (issue 16), with real processes ----


BAD_INPUT += [
    (["--seed", "-1"], ["--seed", "-1", "32-bit"]),
    (["--seed", "4294967296"], ["--seed", "4294967296", "32-bit"]),
    # a minibatch of one row: its advantage std is NaN, which used to be reported as divergence
    (["--num-envs", "1", "--num-steps", "8", "--num-minibatches", "8", "--total-timesteps", "64"], ["at least 2 rows"]),
    (["--num-steps", "1000000000"], ["--total-timesteps 500000", "smaller than one rollout"]),
    (["--num-steps", "10000000000", "--total-timesteps", "1000000000000"], ["rollout storage", "GiB", "--num-steps"]),
]


def test_runtime_fields_are_not_flags():
    """--batch-size, --minibatch-size and --num-iterations are computed from the other flags: tyro
    refuses them as unknown instead of accepting a value that is then overwritten."""
    result = run_script(SCRIPT, "--batch-size", "5", "--minibatch-size", "5", "--num-iterations", "5", timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "Unrecognized options" in result.stderr and "--batch-size" in result.stderr
    assert "--minibatch-size" in result.stderr and "--num-iterations" in result.stderr


def test_namespaced_env_id_gets_one_run_folder(tmp_path):
    """`phys2d/CartPole-v1` (Gymnasium's JAX CartPole, the registry's namespaced ids): the run folder
    is one level under --log-dir, the "/" written as "-", so plot and resume find it like any other."""
    pytest.importorskip("jax")
    result = run_script(SCRIPT, "--env-id", "phys2d/CartPole-v1", "--total-timesteps", "512", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    (name,) = os.listdir(tmp_path)
    assert name.startswith("phys2d-CartPole-v1__ppo__1__"), name
    run_dir = tmp_path / name
    assert result.stdout.split("run folder: ")[0].startswith("torch threads: ")  # the speed levers come first
    assert f"\nrun folder: {run_dir}\n" in result.stdout
    assert sorted(os.listdir(run_dir))[0] == "checkpoint.pt"
    assert len(read_scalars(str(run_dir))["charts/episodic_return"]) >= 10


def test_cartpole_video_prints_no_sdl_error(tmp_path):
    """CartPole renders through pygame. pygame.init() starts SDL's video subsystem, which probes for
    a display and, on a headless machine (no XDG_RUNTIME_DIR, no DISPLAY), prints "error:
    XDG_RUNTIME_DIR is invalid or not set in the environment." into the evaluator's output, on a
    video that is written fine. rgb_array frames need no display: SDL's dummy driver is enough."""
    code = (
        "import sys, numpy as np; from cleanrl_utils.video import record_gymnasium_episodes; "
        "record_gymnasium_episodes('CartPole-v1', lambda obs: np.zeros(len(obs), np.int64), sys.argv[1], 1, seed=0)"
    )
    headless = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "DISPLAY", "WAYLAND_DISPLAY")}
    headless.pop("SDL_VIDEODRIVER", None)
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=headless, cwd=REPO, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    decoded_video(str(tmp_path / "eval-episode-0.mp4"))
    assert "XDG_RUNTIME_DIR" not in result.stdout + result.stderr
    assert not [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error")]


def test_a_total_that_is_not_whole_iterations_is_said_in_the_first_lines(tmp_path):
    """#8: 1,000 steps asked, iterations of 4 envs x 128 steps: the run takes 512 and says so before the run folder."""
    flags = ["--total-timesteps", "1000", "--num-envs", "4", "--num-steps", "128", "--log-dir", str(tmp_path)]
    result = run_script(SCRIPT, *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    line = "--total-timesteps 1,000 is not a whole number of iterations (--num-envs x --num-steps: 512 steps each): "
    first_lines = result.stdout.split("run folder:")[0].splitlines()  # the speed levers, then this line
    assert first_lines[-1] == line + "this run takes 512 steps", first_lines
    checkpoint = torch.load(os.path.join(only_run_dir(tmp_path), "checkpoint.pt"), weights_only=True)
    assert checkpoint["global_step"] == 512


def test_a_continuous_env_id_gets_one_line_and_no_gymnasium_warning(tmp_path):
    """Trial 4, N1: Gymnasium's "Hopper-v4 is out of date" warning (raw colour codes) came before the error line."""
    result = run_script(SCRIPT, "--env-id", "Hopper-v4", "--total-timesteps", "512", "--log-dir", str(tmp_path), timeout=120)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: --env-id 'Hopper-v4' has Box(") and "discrete" in lines[0]
