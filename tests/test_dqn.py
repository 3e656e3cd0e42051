"""Tests of cleanrl/dqn.py (DQN, same-step autoreset on Gymnasium vector envs): the stored transitions against a
per-episode reconstruction from plain single envs, the TD target by hand, the replay buffer's ring, sampling and
state, the update schedule for any env count, a CartPole learning run and its saved model evaluated (and filmed),
determinism, exact resume with the buffer, resume without it, and bad input."""

import io
import os
import shutil
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from helpers import (
    assert_one_error_line,
    decoded_video,
    folder_state,
    one_line_exit,
    only_run_dir,
    read_scalars,
    run_python,
    run_script,
)

from cleanrl.dqn import QNetwork, ReplayBuffer, linear_schedule, make_env, real_next_obs, td_loss
from cleanrl_utils.steps import updates_due

SCRIPT = "dqn"
TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/epsilon"}
TAGS |= {"losses/td_loss", "losses/q_values"}


# ---- replay rules on a real same-step vector env ----


def store_real_steps(num_envs: int, limit: int, seed: int, num_steps: int, buffers: list[ReplayBuffer]):
    """Random actions in make_env's vector env (same-step autoreset), stored as the script's loop stores them
    (real_next_obs, then ReplayBuffer.add), into every buffer of `buffers`. Returns the actions, the (term, trunc)
    flags and the observations the vector env returned."""
    envs = make_env("CartPole-v1", num_envs, "sync", max_episode_steps=limit)
    obs, _ = envs.reset(seed=seed)
    rng = np.random.default_rng(seed)
    actions, terms, truncs, returned = [], [], [], []
    for _ in range(num_steps):
        action = rng.integers(0, 2, num_envs)
        next_obs, reward, term, trunc, info = envs.step(action)
        for rb in buffers:
            rb.add(obs, real_next_obs(next_obs, term, trunc, info), action, reward, term)
        for storage, value in zip((actions, terms, truncs, returned), (action, term, trunc, next_obs)):
            storage.append(value)
        obs = next_obs
    envs.close()
    return np.array(actions), np.array(terms), np.array(truncs), np.array(returned)


def single_env_episodes(num_envs: int, limit: int, seed: int, actions: np.ndarray) -> list[list[list[tuple]]]:
    """The same actions replayed on plain (non-vector) envs with the same seeds, one env at a time: per env, a list
    of episodes, each a list of (obs, action, reward, next_obs, terminated). An episode's last next_obs is the
    observation the env returned at its end; the next episode starts from a reset."""
    per_env = []
    for i in range(num_envs):
        env = gym.make("CartPole-v1", max_episode_steps=limit)
        obs, _ = env.reset(seed=seed + i)
        episodes, episode = [], []
        for action in actions[:, i]:
            next_obs, reward, terminated, truncated, _ = env.step(int(action))
            episode.append((obs, action, reward, next_obs, terminated))
            obs = next_obs
            if terminated or truncated:
                episodes.append(episode)
                episode = []
                obs, _ = env.reset()
        per_env.append(episodes + [episode])
        env.close()
    return per_env


def test_stored_transitions_match_a_per_episode_reconstruction():
    """Every stored transition equals the one rebuilt from single envs: at truncations the next obs is the
    episode's final one with done 0, at terminations done 1, and nothing from the next episode is stored as a next
    obs. A ring buffer smaller than the run holds exactly the last steps."""
    num_envs, limit, seed, num_steps = 4, 15, 3, 160
    full, ring = ReplayBuffer(num_envs * num_steps, num_envs, (4,)), ReplayBuffer(num_envs * 50, num_envs, (4,))
    actions, terms, truncs, returned = store_real_steps(num_envs, limit, seed, num_steps, [full, ring])
    reference = single_env_episodes(num_envs, limit, seed, actions)
    truncated, terminated = truncs & ~terms, terms
    assert truncated.sum() >= 10 and terminated.sum() >= 10, (truncated.sum(), terminated.sum())

    for i in range(num_envs):
        transitions = [t for episode in reference[i] for t in episode]
        assert len(transitions) == num_steps
        for t, (obs, action, reward, next_obs, done) in enumerate(transitions):
            np.testing.assert_array_equal(full.obs[t, i], obs)
            np.testing.assert_array_equal(full.next_obs[t, i], next_obs)
            assert (full.actions[t, i], full.rewards[t, i], full.dones[t, i]) == (action, reward, float(done))
        for t in np.flatnonzero(terms[:, i] | truncs[:, i]):
            # the vector env returned the next episode's first observation: it is stored as the next row's obs only
            assert not np.array_equal(full.next_obs[t, i], returned[t, i])
            if t + 1 < num_steps:
                np.testing.assert_array_equal(full.obs[t + 1, i], returned[t, i])
        continuing = np.flatnonzero(~(terms[:-1, i] | truncs[:-1, i]))
        np.testing.assert_array_equal(full.next_obs[continuing, i], full.obs[continuing + 1, i])
    np.testing.assert_array_equal(full.dones, terms.astype(np.float32))  # truncations: done 0

    assert ring.rows == 50 and ring.pos == num_steps % 50 and ring.env_steps == num_envs * num_steps
    order = (np.arange(50) + ring.pos) % 50  # oldest row first
    for name in ReplayBuffer.NAMES:
        np.testing.assert_array_equal(getattr(ring, name)[order], getattr(full, name)[num_steps - 50 :], err_msg=name)


def labelled_buffer(rows: int, num_envs: int, steps: int) -> ReplayBuffer:
    """A buffer whose every field of transition (step t, env i) encodes t and i."""
    rb = ReplayBuffer(rows * num_envs, num_envs, (2,))
    for t in range(steps):
        envs = np.arange(num_envs)
        obs = np.stack([np.full(num_envs, t), envs], axis=1).astype(np.float32)
        rb.add(obs, obs + 0.5, 1000 * t + envs, t + envs / 10, (t + envs) % 2)
    return rb


@pytest.mark.parametrize("steps", [7, 23])  # partly filled; wrapped around (10 rows)
def test_sample_is_uniform_over_stored_transitions_and_keeps_fields_together(steps):
    rows, num_envs = 10, 3
    rb = labelled_buffer(rows, num_envs, steps)
    np.random.seed(0)
    obs, actions, rewards, next_obs, dones = (x.numpy() for x in rb.sample(30_000, torch.device("cpu")))
    t, env = obs[:, 0].astype(int), obs[:, 1].astype(int)
    np.testing.assert_array_equal(next_obs, obs + 0.5)
    np.testing.assert_array_equal(actions, 1000 * t + env)
    np.testing.assert_allclose(rewards, t + env / 10, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(dones, (t + env) % 2)
    stored = {(s, e) for s in range(max(0, steps - rows), steps) for e in range(num_envs)}
    counts = {}
    for key in zip(t.tolist(), env.tolist()):
        counts[key] = counts.get(key, 0) + 1
    assert set(counts) == stored  # nothing unwritten, nothing overwritten, every stored transition drawn
    expected = 30_000 / len(stored)
    assert all(abs(count - expected) < 0.2 * expected for count in counts.values()), counts


def test_buffer_state_round_trips_through_a_torch_file():
    rb = labelled_buffer(10, 3, 23)
    file = io.BytesIO()
    torch.save(rb.state_dict(), file)
    file.seek(0)
    state = torch.load(file, weights_only=True)
    assert isinstance(state["pos"], int) and isinstance(state["env_steps"], int)
    copy = ReplayBuffer(30, 3, (2,))
    copy.load_state_dict(state)
    assert (copy.pos, copy.env_steps) == (rb.pos, rb.env_steps) == (3, 69)
    np.random.seed(5)
    expected = rb.sample(64, torch.device("cpu"))
    np.random.seed(5)
    for a, b in zip(expected, copy.sample(64, torch.device("cpu"))):
        assert torch.equal(a, b)
    copy.load_state_dict({})  # a checkpoint saved with --no-checkpoint-buffer: nothing to restore
    assert copy.env_steps == 69
    with pytest.raises(ValueError, match="saved obs float32"):
        ReplayBuffer(40, 4, (2,)).load_state_dict(state)


# ---- TD target and schedules ----


def test_td_target_bootstraps_truncations_and_not_terminations():
    """Linear Q-networks, numbers by hand: Q(s) = (s0, 2 s1), Q_target(s') = (3 s'0, s'1), gamma 0.9.
    Row 0 is a truncation (stored done 0, next obs the final one): target 1 + 0.9 * max(3, 2) = 3.7.
    Row 1 is a termination (done 1): target = reward 0.5, Q_target(s') = (3, 5) is ignored."""
    q_network, target_network = nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        q_network.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
        target_network.weight.copy_(torch.tensor([[3.0, 0.0], [0.0, 1.0]]))
    obs = torch.tensor([[1.0, 1.0], [2.0, 0.0]])
    next_obs = torch.tensor([[1.0, 2.0], [1.0, 5.0]])
    actions, rewards, dones = torch.tensor([1, 0]), torch.tensor([1.0, 0.5]), torch.tensor([0.0, 1.0])
    loss, q_values = td_loss(q_network, target_network, obs, actions, rewards, next_obs, dones, 0.9)
    assert q_values.tolist() == [2.0, 2.0]
    assert loss.item() == pytest.approx(((2.0 - 3.7) ** 2 + (2.0 - 0.5) ** 2) / 2)
    loss.backward()
    assert q_network.weight.grad is not None and target_network.weight.grad is None  # the target is held fixed
    # done everywhere: the target is the reward alone
    loss0, _ = td_loss(q_network, target_network, obs, actions, rewards, next_obs, torch.ones(2), 0.9)
    assert loss0.item() == pytest.approx(((2.0 - 1.0) ** 2 + (2.0 - 0.5) ** 2) / 2)


def test_q_network_is_cleanrls_120_84_relu_mlp():
    q_network = QNetwork(4, 2)
    shapes = [tuple(p.shape) for p in q_network.parameters()]
    assert shapes == [(120, 4), (120,), (84, 120), (84,), (2, 84), (2,)]
    assert q_network(torch.zeros(5, 4)).shape == (5, 2)


@pytest.mark.parametrize("num_envs", [1, 3, 4, 7, 16])
@pytest.mark.parametrize("every", [1, 4, 10, 500])
def test_updates_keep_their_rate_per_env_step_for_any_env_count(num_envs, every):
    steps = [num_envs * i for i in range(1, 5001)]
    due = [updates_due(step, num_envs, every) for step in steps]
    assert min(due) >= 0 and sum(due) == steps[-1] // every
    if num_envs == 1:
        assert due == [int(step % every == 0) for step in steps]


def test_linear_schedule():
    assert linear_schedule(1.0, 0.05, 1000, 0) == 1.0
    assert linear_schedule(1.0, 0.05, 1000, 500) == pytest.approx(0.525)
    assert linear_schedule(1.0, 0.05, 1000, 1000) == pytest.approx(0.05)
    assert linear_schedule(1.0, 0.05, 1000, 10**6) == 0.05
    assert linear_schedule(0.3, 0.3, 1000, 400) == 0.3


# ---- learning, evaluation, video ----

# CleanRL's CartPole settings made quick: 25k steps (not 500k), learning from 1k (not 10k), a gradient step every 2
# env steps (not 10), lr 1e-3 (not 2.5e-4), target copied every 100 steps (not 500), epsilon down to 0.05 over the
# first 20% (not 50%). Seeds 1-5 (nice -n 19, one at a time, 2-core Xeon shared): last-20 training returns 289.6,
# 274.1, 367.7, 227.1, 254.2, evaluated (10 episodes, epsilon 0.05, seed 1) 500.0, 316.1, 500.0, 237.6, 289.1;
# 19-20 s each. A fresh network scores about 20; the thresholds below (150) sit well under the worst seed.
LEARN = ["--env-id", "CartPole-v1", "--total-timesteps", "25000", "--learning-starts", "1000", "--train-frequency", "2"]
LEARN += ["--learning-rate", "1e-3", "--target-network-frequency", "100", "--exploration-fraction", "0.2"]


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("cartpole")
    result = run_script(SCRIPT, *LEARN, "--seed", "1", "--log-dir", str(log_dir), "--save-model", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return only_run_dir(log_dir)


def test_cartpole_learns(cartpole_run):
    scalars = read_scalars(cartpole_run)
    assert TAGS <= set(scalars), TAGS - set(scalars)
    returns = [value for _, value in scalars["charts/episodic_return"]]
    assert np.mean(returns[:20]) < 50  # it starts from scratch, acting at random
    assert np.mean(returns[-20:]) >= 150, returns[-20:]


def test_saved_model_evaluates_epsilon_greedy(cartpole_run):
    from cleanrl_utils.evaluate import evaluate

    model_path = os.path.join(cartpole_run, f"{SCRIPT}.cleanrl_model")
    checkpoint = torch.load(model_path, weights_only=True)
    assert checkpoint["script"] == SCRIPT and checkpoint["script_path"] == f"cleanrl/{SCRIPT}.py"
    assert set(checkpoint) == {"script", "script_path", "model_state_dict", "args"}
    returns = evaluate(model_path, episodes=10, seed=1, cuda=False)  # epsilon 0.05, as CleanRL evaluates DQN
    assert np.mean(returns) >= 150, returns
    assert evaluate(model_path, episodes=10, seed=1, cuda=False) == returns  # seeded
    assert np.mean(evaluate(model_path, episodes=10, seed=1, epsilon=1.0, cuda=False)) < 50  # all random: epsilon applies
    one_line_exit(lambda: evaluate(model_path, epsilon=1.5), "--epsilon", "1.5")


def test_evaluate_cli_films_an_episode(cartpole_run, tmp_path):
    model_path = os.path.join(cartpole_run, f"{SCRIPT}.cleanrl_model")
    command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "1"]
    command += ["--greedy", "--capture-video", "--video-dir", str(tmp_path), "--no-cuda"]
    result = run_python(command[1:], timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "episode 0: return" in result.stdout and "mean return over 1 episode" in result.stdout
    decoded_video(str(tmp_path / "eval-episode-0.mp4"))


# ---- determinism ----

# 2 CartPole envs with a 30-step limit (truncations), 3,000 steps, learning from step 500, epsilon decaying.
SHORT = ["--env-id", "CartPole-v1", "--num-envs", "2", "--max-episode-steps", "30", "--total-timesteps", "3000"]
SHORT += ["--learning-starts", "500", "--train-frequency", "2", "--target-network-frequency", "100", "--seed", "3"]


@pytest.fixture(scope="module")
def short_runs(tmp_path_factory):
    scalars = []
    for i in range(2):
        log_dir = tmp_path_factory.mktemp(f"short{i}")
        result = run_script(SCRIPT, *SHORT, "--log-dir", str(log_dir))
        assert result.returncode == 0, result.stderr[-3000:]
        scalars.append(read_scalars(only_run_dir(log_dir)))
    return scalars


def test_short_run_logs_every_tag_every_1000_steps(short_runs):
    scalars = short_runs[0]
    assert TAGS <= set(scalars), TAGS - set(scalars)
    # logged each time the global step passes a multiple of 1,000 (and at every checkpoint: here the last step)
    steps = [step for step, _ in scalars["losses/td_loss"]]
    assert steps == [1000, 2000, 3000]
    for tag in ("losses/q_values", "charts/SPS", "charts/epsilon"):
        assert [step for step, _ in scalars[tag]] == steps, tag
    epsilons = [value for _, value in scalars["charts/epsilon"]]
    assert epsilons == sorted(epsilons, reverse=True) and epsilons[-1] == pytest.approx(0.05)
    assert all(length <= 30 for _, length in scalars["charts/episodic_length"])


def test_same_seed_gives_identical_losses(short_runs):
    first, second = short_runs
    for tag in sorted(TAGS - {"charts/SPS"}):
        assert first[tag] == second[tag], tag


# ---- checkpoint and resume ----

# Epsilon is held constant (0.3): its schedule spans --total-timesteps, which a resumed run extends, so a
# 1,500-step run resumed to 3,000 acts as a 3,000-step run only if epsilon does not depend on the run's length.
RESUME = ["--env-id", "CartPole-v1", "--num-envs", "2", "--max-episode-steps", "40", "--learning-starts", "400"]
RESUME += ["--train-frequency", "2", "--target-network-frequency", "100", "--start-e", "0.3", "--end-e", "0.3"]
RESUME += ["--seed", "2"]


def run_and_resume(log_dir, *first_flags: str, resume_flags: tuple[str, ...] = ()) -> tuple[str, str]:
    """A 1,500-step run, then resumed to 3,000 steps. Returns (run folder, the resumed run's stdout)."""
    result = run_script(SCRIPT, *RESUME, "--total-timesteps", "1500", *first_flags, "--log-dir", str(log_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = only_run_dir(log_dir)
    shutil.copy(os.path.join(run_dir, "checkpoint.pt"), os.path.join(str(log_dir), "half.pt"))
    result = run_script(SCRIPT, "--resume", os.path.join(run_dir, "checkpoint.pt"), "--total-timesteps", "3000", *resume_flags)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result.stdout


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("uninterrupted")
    flags = ["--total-timesteps", "3000", "--checkpoint-every", "400", "--keep-checkpoints", "--log-dir", str(log_dir)]
    result = run_script(SCRIPT, *RESUME, *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    return only_run_dir(log_dir)


def test_kept_checkpoints_hold_the_buffer_and_evaluate_one_by_one(uninterrupted, capsys):
    """--keep-checkpoints in an off-policy script: every checkpoint stays under its step, replay buffer included,
    and the run folder evaluates one by one."""
    from cleanrl_utils.evaluate import EvalArgs, evaluate_kept_checkpoints, kept_checkpoints

    kept = kept_checkpoints(uninterrupted)
    assert [step for step, _ in kept] == [800, 1600, 2400, 3000]  # every 400 iterations of 2 envs, and the end
    assert torch.load(kept[0][1], weights_only=True)["replay_buffer"]["env_steps"] == 800
    best_step, _ = evaluate_kept_checkpoints(uninterrupted, EvalArgs(model_path=uninterrupted, episodes=2, cuda=False))
    assert best_step in {800, 1600, 2400, 3000} and capsys.readouterr().out.count("mean return over 2 episodes") == 4


def test_resume_with_the_buffer_continues_exactly(uninterrupted, tmp_path):
    """Same losses logged, same episodes, same final networks, Adam state and buffer as the uninterrupted run."""
    run_dir, stdout = run_and_resume(tmp_path)
    half = torch.load(tmp_path / "half.pt", weights_only=True)
    assert half["iteration"] == 750 and half["replay_buffer"]["env_steps"] == 1500
    assert "replay buffer: 1,500 transitions restored" in stdout
    expected, resumed = read_scalars(uninterrupted), read_scalars(run_dir)
    for tag in sorted(TAGS - {"charts/SPS"}):
        assert resumed[tag] == expected[tag], tag
        assert any(step > 1500 for step, _ in resumed[tag]), tag
    final = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    reference = torch.load(os.path.join(uninterrupted, "checkpoint.pt"), weights_only=True)
    assert (final["iteration"], final["global_step"]) == (1500, 3000)
    for key in ("model_state_dict", "target_state_dict", "replay_buffer"):
        assert final[key].keys() == reference[key].keys()
        for name, value in final[key].items():
            assert torch.equal(value, reference[key][name]) if torch.is_tensor(value) else value == reference[key][name]
    for state, ref in zip(
        final["optimizer_state_dict"]["state"].values(), reference["optimizer_state_dict"]["state"].values()
    ):
        assert all(torch.equal(state[k], ref[k]) for k in ("exp_avg", "exp_avg_sq"))


def test_a_saved_buffer_that_does_not_fit_gives_one_line(tmp_path):
    result = run_script(SCRIPT, *RESUME, "--total-timesteps", "200", "--learning-starts", "100", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    path = os.path.join(only_run_dir(tmp_path), "checkpoint.pt")
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["replay_buffer"]["obs"] = torch.zeros(7, 2, 4)
    torch.save(checkpoint, path)
    result = run_script(SCRIPT, "--resume", path, "--total-timesteps", "400", timeout=120)
    assert_one_error_line(result, ["'replay_buffer' entry", "saved obs float32[7, 2, 4]", "float32[5000, 2, 4]"])


def test_resume_without_the_buffer_refills_it(tmp_path):
    """--no-checkpoint-buffer: a much smaller file; the resumed run refills its buffer and trains again only
    once it holds --learning-starts transitions. --checkpoint-buffer may be switched back on when resuming."""
    run_dir, stdout = run_and_resume(tmp_path, "--no-checkpoint-buffer", resume_flags=("--checkpoint-buffer",))
    half = torch.load(tmp_path / "half.pt", weights_only=True)
    assert half["replay_buffer"] == {}
    # the default 10,000-transition buffer: obs and next obs 2 x 16 bytes, action 8, reward 4, done 4 = 480 kB
    assert os.path.getsize(tmp_path / "half.pt") < os.path.getsize(os.path.join(run_dir, "checkpoint.pt")) / 2
    assert "replay buffer: refilled from empty" in stdout
    # Resumed at step 1,500, the buffer takes 400 transitions (to step 1,900) before the next gradient step (at
    # 1,902): 550 gradient steps to step 3,000, where a run with its buffer takes 750. Adam counts them.
    final = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    adam_steps = lambda checkpoint: int(checkpoint["optimizer_state_dict"]["state"][0]["step"])  # noqa: E731
    assert adam_steps(half) == (1500 - 400) // 2 and adam_steps(final) == adam_steps(half) + 550
    assert final["replay_buffer"]["env_steps"] == 1500


# ---- bad input ----


BAD_INPUT = [
    (["--env-id", "Pong-v5"], ["'Pong-v5' is an EnvPool Atari id", "_envpool"]),  # was: "did you mean Ant-v5?"
    (["--buffer-size", "100"], ["--batch-size 128", "--buffer-size 100"]),
    (["--num-envs", "4", "--buffer-size", "3", "--batch-size", "2"], ["--buffer-size 3", "--num-envs 4"]),
    (["--learning-starts", "600000"], ["--learning-starts 600000", "--total-timesteps 500000"]),
    (["--start-e", "1.5"], ["--start-e", "1.5", "[0, 1]"]),
    (["--end-e", "-0.1"], ["--end-e", "-0.1", "[0, 1]"]),
    (["--exploration-fraction", "0"], ["--exploration-fraction", "(0, 1]"]),
    (["--train-frequency", "0"], ["--train-frequency", "0"]),
    (["--target-network-frequency", "-5"], ["--target-network-frequency", "-5"]),
    (["--env-id", "Pendulum-v1"], ["'Pendulum-v1'", "discrete"]),
    (["--env-id", "CartPol-v1"], ["'CartPol-v1'", "CartPole-v1"]),
]


def test_extending_a_run_keeps_its_epsilon_schedule_and_a_resume_may_end_before_learning_starts(tmp_path):
    """#4: a 2,000-step run whose epsilon decays over all of it (--exploration-fraction 1), resumed to 4,000 steps,
    keeps epsilon at --end-e: the schedule is that of the first --total-timesteps (re-planned for 4,000 it would be
    back at 0.29 at step 3,000). A resume to 1,500 steps (less than --learning-starts 1,900) is allowed: the run has
    nothing left to do and says so."""
    flags = ["--env-id", "CartPole-v1", "--total-timesteps", "2000", "--learning-starts", "1900", "--seed", "2"]
    flags += ["--exploration-fraction", "1", "--log-dir", str(tmp_path)]
    result = run_script(SCRIPT, *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    path = os.path.join(run_dir, "checkpoint.pt")
    before = folder_state(run_dir)
    result = run_script(SCRIPT, "--resume", path, "--total-timesteps", "1500")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "already ran 2000 iterations, more than the 1500 this --total-timesteps asks for" in result.stdout
    assert folder_state(run_dir) == before  # nothing restored or written: no new events file, the model as it was
    result = run_script(SCRIPT, "--resume", path, "--total-timesteps", "4000")
    assert result.returncode == 0, result.stderr[-3000:]
    epsilon = read_scalars(run_dir)["charts/epsilon"]
    assert [step for step, _ in epsilon] == [1000, 2000, 3000, 4000]
    assert epsilon[0][1] == pytest.approx(1.0 - 0.95 * 999 / 2000) and epsilon[1][1] == pytest.approx(1.0 - 0.95 * 1999 / 2000)
    assert epsilon[2][1] == epsilon[3][1] == pytest.approx(0.05)
    assert torch.load(path, weights_only=True)["args"]["exploration_steps"] == 2000


def test_a_total_that_is_not_whole_iterations_is_said_in_the_first_lines(tmp_path):
    """#8: 1,001 steps asked of 2 envs: the run takes 1,000 and says so before the run folder; 1,000 asked, no line."""
    flags = ["--num-envs", "2", "--learning-starts", "100", "--log-dir", str(tmp_path)]
    result = run_script(SCRIPT, *flags, "--total-timesteps", "1001")
    assert result.returncode == 0, result.stderr[-3000:]
    line = "--total-timesteps 1,001 is not a whole number of iterations (one step of each of --num-envs envs: 2 steps each): "
    first_lines = result.stdout.split("run folder:")[0].splitlines()  # the speed levers, then this line
    assert first_lines[-1] == line + "this run takes 1,000 steps", first_lines
    path = os.path.join(only_run_dir(tmp_path), "checkpoint.pt")
    assert torch.load(path, weights_only=True)["global_step"] == 1000
    result = run_script(SCRIPT, "--resume", path, "--total-timesteps", "1000")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "whole number" not in result.stdout
