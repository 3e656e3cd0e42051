"""Tests of cleanrl/ppo_atari_envpool_async.py: per-env GAE and masking on real async EnvPool rollouts against
brute force, the recv order that makes runs repeatable, real short runs (every tag, same seed same losses,
saved-model evaluation), --overlap (Ctrl-C, resume, the same update as the serial path), bad input."""

import copy
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from gae_reference import next_step_reference
from helpers import (
    ATARI_TAGS,
    assert_evaluates_whole_games_of_its_weights,
    marked_frame_returns,
    only_run_dir,
    read_scalars,
    run_interrupted,
    run_script,
)
from test_ppo_atari_envpool import MARKED

from cleanrl.ppo_atari_envpool import compute_gae
from cleanrl.ppo_atari_envpool_async import Agent, Args, collect_rollout, compute_gae_async, make_env, new_storage, ppo_update

SCRIPT = "ppo_atari_envpool_async"


def per_env_reference(env_ids, values, rewards, terminations, truncations, gamma, gae_lambda):
    """Rebuild each env's trajectory from its env ids (rows are in recv order and an env is at most once per row,
    so row-major order is each env's own order) and run the brute force on it as on a one-env sync rollout:
    appearance j's transition is rewarded and flagged by what appearance j + 1 delivered, the boundary delivered
    with the first appearance makes it stale, and the last appearance has no result (invalid). Also runs the sync
    script's compute_gae on each trajectory: both must agree with the async scan."""
    flat_ids, flat_values, flat_rewards = env_ids.reshape(-1), values.reshape(-1), rewards.reshape(-1)
    flat_term, flat_trunc = terminations.reshape(-1), truncations.reshape(-1)
    advantages, valid = np.zeros(flat_ids.shape), np.zeros(flat_ids.shape, bool)
    for env in np.unique(flat_ids):
        rows = np.flatnonzero(flat_ids == env)
        trajectory = (
            flat_values[rows][:, None],
            flat_rewards[rows[1:]][:, None],
            flat_term[rows[1:]][:, None],
            flat_trunc[rows[1:]][:, None],
            np.array([flat_term[rows[0]] or flat_trunc[rows[0]]]),
        )
        env_advantages, env_valid = next_step_reference(*trajectory, gamma, gae_lambda)
        advantages[rows[:-1]], valid[rows[:-1]] = env_advantages[:, 0], env_valid[:, 0]
        if len(rows) > 1:
            sync_advantages, sync_valid = compute_gae(*(torch.as_tensor(x) for x in trajectory), gamma, gae_lambda)
            np.testing.assert_array_equal(sync_valid[:, 0].numpy(), env_valid[:, 0])
            np.testing.assert_allclose(sync_advantages[:, 0].numpy(), env_advantages[:, 0], rtol=1e-10, atol=1e-10)
    return advantages.reshape(env_ids.shape), valid.reshape(env_ids.shape)


def async_gae(env_ids, values, rewards, terminations, truncations, num_envs, gamma, gae_lambda):
    advantages, valid = compute_gae_async(
        torch.as_tensor(env_ids, dtype=torch.long),
        torch.as_tensor(values, dtype=torch.float64),
        torch.as_tensor(rewards, dtype=torch.float64),
        torch.as_tensor(terminations),
        torch.as_tensor(truncations),
        num_envs,
        gamma,
        gae_lambda,
    )
    return advantages.numpy(), valid.numpy()


class RecordingPool:
    """An async EnvPool that keeps a copy of everything recv() returned and send() was given."""

    def __init__(self, envs):
        self.envs, self.received, self.sent = envs, [], []

    def recv(self):
        obs, reward, term, trunc, info = self.envs.recv()
        row = dict(obs=obs.copy(), reward=reward.copy(), term=term.copy(), trunc=trunc.copy())
        self.received.append(row | {key: info[key].copy() for key in ("env_id", "terminated", "elapsed_step")})
        return obs, reward, term, trunc, info

    def send(self, actions, env_id):
        self.sent.append((np.array(actions), np.array(env_id)))
        self.envs.send(actions, env_id)


def test_async_gae_and_mask_match_brute_force_on_real_rollouts():
    """Real Breakout with episodic_life and a 50-step time limit, 8 envs in recv batches of 4 with EnvPool's own
    threads (arbitrary order, uneven appearances), four rollouts through the script's collect_rollout. Storage
    must equal what EnvPool delivered; the advantages (random values, so every pairing shows) and the mask
    must equal the per-env brute force on every row; and the mask must equal a signal independent of the
    flags: a row is stale when the env's next appearance shows the game did not advance (elapsed_step unchanged
    after a life loss, back to 0 after game over or truncation)."""
    gamma, gae_lambda, num_envs, batch, num_rows = 0.97, 0.9, 8, 4, 64
    envs = RecordingPool(make_env("Breakout-v5", num_envs, 3, max_episode_steps=50, batch_size=batch))
    envs.envs.async_reset()
    torch.manual_seed(0)
    agent = Agent(envs.envs.single_action_space.n)
    storage = new_storage(num_rows, batch, (4, 84, 84), obs_dtype=torch.uint8, device="cpu")
    episode_returns = np.zeros(num_envs)
    rng = np.random.default_rng(0)
    counts = dict(life_losses=0, truncations=0, stale=0)
    for _ in range(4):
        envs.received.clear(), envs.sent.clear()
        collect_rollout(envs, agent, storage, episode_returns)
        got = {key: np.stack([row[key] for row in envs.received]) for key in ("env_id", "reward", "term", "trunc")}
        np.testing.assert_array_equal(storage["env_ids"].numpy(), got["env_id"])
        np.testing.assert_array_equal(storage["obs"].numpy(), np.stack([row["obs"] for row in envs.received]))
        np.testing.assert_array_equal(storage["rewards"].numpy(), got["reward"])
        np.testing.assert_array_equal(storage["terminations"].numpy(), got["term"])
        np.testing.assert_array_equal(storage["truncations"].numpy(), got["trunc"])
        np.testing.assert_array_equal(storage["actions"].numpy(), np.stack([actions for actions, _ in envs.sent]))
        np.testing.assert_array_equal(got["env_id"], np.stack([ids for _, ids in envs.sent]))  # each row sent back

        values = rng.normal(size=(num_rows, batch))
        advantages, valid = async_gae(
            got["env_id"], values, got["reward"], got["term"], got["trunc"], num_envs, gamma, gae_lambda
        )
        expected, expected_valid = per_env_reference(
            got["env_id"], values, got["reward"], got["term"], got["trunc"], gamma, gae_lambda
        )
        np.testing.assert_array_equal(valid, expected_valid)
        np.testing.assert_allclose(advantages, expected, rtol=1e-10, atol=1e-10)
        assert (advantages[~valid] == 0).all()

        elapsed, flat_ids = np.stack([row["elapsed_step"] for row in envs.received]).reshape(-1), got["env_id"].reshape(-1)
        flat_valid = valid.reshape(-1)
        for env in range(num_envs):
            rows = np.flatnonzero(flat_ids == env)
            advanced = (elapsed[rows[1:]] != elapsed[rows[:-1]]) & (elapsed[rows[1:]] != 0)
            np.testing.assert_array_equal(flat_valid[rows[:-1]], advanced)
            assert not flat_valid[rows[-1]]  # no result yet
        game_over = np.stack([row["terminated"] for row in envs.received]).astype(bool)
        counts["life_losses"] += int((got["term"] & ~game_over).sum())
        counts["truncations"] += int(got["trunc"].sum())
        counts["stale"] += int((got["term"] | got["trunc"]).sum())
    envs.envs.close()
    assert counts["life_losses"] >= 5 and counts["truncations"] >= 4 and counts["stale"] >= 9, counts


def test_async_gae_matches_brute_force_on_random_orders():
    """Synthetic recordings with very uneven appearances: some envs appear in most rows, some once or never,
    boundaries (both flags at once too) anywhere next-step semantics allow: never two deliveries in a row."""
    rng = np.random.default_rng(11)
    appeared_once = never = 0
    for _ in range(300):
        num_envs = int(rng.integers(1, 8))
        batch, num_rows = int(rng.integers(1, num_envs + 1)), int(rng.integers(1, 20))
        weights = rng.random(num_envs) ** 4 + 1e-3
        env_ids = np.stack([rng.choice(num_envs, batch, replace=False, p=weights / weights.sum()) for _ in range(num_rows)])
        terminations, truncations = np.zeros((num_rows, batch), bool), np.zeros((num_rows, batch), bool)
        delivered_boundary = np.zeros(num_envs, bool)
        for row in range(num_rows):
            for col, env in enumerate(env_ids[row]):
                if not delivered_boundary[env]:
                    terminations[row, col], truncations[row, col] = rng.random() < 0.2, rng.random() < 0.15
                delivered_boundary[env] = terminations[row, col] | truncations[row, col]
        values, rewards = rng.normal(size=(num_rows, batch)), rng.normal(size=(num_rows, batch))
        gamma, gae_lambda = float(rng.uniform(0.8, 1.0)), float(rng.uniform(0.0, 1.0))
        advantages, valid = async_gae(env_ids, values, rewards, terminations, truncations, num_envs, gamma, gae_lambda)
        expected, expected_valid = per_env_reference(env_ids, values, rewards, terminations, truncations, gamma, gae_lambda)
        np.testing.assert_array_equal(valid, expected_valid)
        np.testing.assert_allclose(advantages, expected, rtol=1e-10, atol=1e-10)
        appearances = np.bincount(env_ids.reshape(-1), minlength=num_envs)
        appeared_once += int((appearances == 1).sum())
        never += int((appearances == 0).sum())
    assert appeared_once > 20 and never > 20


def test_one_simulation_thread_gives_a_fixed_recv_order():
    """Why a seeded run repeats only with --num-threads 1: with several threads the envs that finish first
    depend on scheduling; one thread serves the envs first in, first out, so with 16 envs in batches of 8 the
    order is envs 0-7, 8-15, 0-7, ... whatever the timing."""
    orders = []
    for _ in range(2):
        envs = make_env("Pong-v5", 16, 1, batch_size=8, num_threads=1)
        envs.async_reset()
        order = []
        for _ in range(40):
            env_id = envs.recv()[-1]["env_id"]
            order.append(env_id.tolist())
            envs.send(np.zeros(8, dtype=np.int64), env_id)
        envs.close()
        orders.append(order)
    assert orders[0] == orders[1] == [list(range(8)), list(range(8, 16))] * 20


def test_overlap_update_equals_serial_update():
    """The learner's update is the same function on both paths; with --overlap it runs while the actor thread
    collects a rollout with its own copy of the weights. Same batch, weights, Adam state and minibatch
    generator: bit-identical weights after the update, and the actor's copy untouched by the learner."""
    torch.manual_seed(0)
    args = Args(update_epochs=2, num_minibatches=4)
    args.batch_size, args.minibatch_size = 64, 16
    agent = Agent(4, bf16=False, channels_last=False)
    batch = dict(
        obs=torch.randint(0, 256, (64, 4, 84, 84), dtype=torch.uint8),
        actions=torch.randint(0, 4, (64,)),
        old_logprobs=torch.randn(64) - 1.4,
        advantages=torch.randn(64),
        returns=torch.randn(64),
        old_values=torch.randn(64),
        valid=torch.rand(64) > 0.1,
    )

    def updated_weights(with_actor: bool) -> dict:
        learner = copy.deepcopy(agent)
        optimizer = torch.optim.Adam(learner.parameters(), lr=2.5e-4, eps=1e-5)
        if not with_actor:
            ppo_update(learner, optimizer, batch, args, torch.Generator().manual_seed(3))
            return learner.state_dict()
        envs = make_env("Breakout-v5", 8, 1, batch_size=4)
        envs.async_reset()
        actor = copy.deepcopy(agent)
        storage = new_storage(48, 4, (4, 84, 84), obs_dtype=torch.uint8, device="cpu")
        with ThreadPoolExecutor(max_workers=1) as actor_thread:
            rollout = actor_thread.submit(collect_rollout, envs, actor, storage, np.zeros(8))
            ppo_update(learner, optimizer, batch, args, torch.Generator().manual_seed(3))
            rollout.result()
        envs.close()
        assert (storage["env_ids"] >= 0).all() and storage["obs"].float().std() > 0  # the actor did play
        for name, tensor in actor.state_dict().items():
            assert torch.equal(tensor, agent.state_dict()[name]), name
        return learner.state_dict()

    serial, overlapped = updated_weights(False), updated_weights(True)
    changed = False
    for name, tensor in serial.items():
        assert torch.equal(tensor, overlapped[name]), name
        changed |= not torch.equal(tensor, agent.state_dict()[name])
    assert changed


SHORT_RUN = ["--env-id", "Pong-v5", "--total-timesteps", "2048", "--max-episode-steps", "100", "--num-threads", "1"]
SHORT_RUN += ["--torch-threads", "2"]  # fixed: auto threads follow the load, and float sums differ by thread count
SHORT_RUN += ["--update-epochs", "1"]  # the update is most of a run's time; these tests check tags, files, determinism


@pytest.fixture(scope="module")
def two_short_runs(tmp_path_factory):
    """The same seeded short Pong run twice (2 iterations of 16 envs x 64 steps in recv batches of 8) with one
    simulation thread, so the recv order is fixed, and a 100-step time limit so games are logged."""
    dirs = []
    for i in range(2):
        log_dir = tmp_path_factory.mktemp(f"pong{i}")
        result = run_script(SCRIPT, *SHORT_RUN, "--seed", "5", "--log-dir", str(log_dir), "--save-model")
        assert result.returncode == 0, result.stderr[-3000:]
        dirs.append(only_run_dir(log_dir))
    return dirs


def test_short_pong_run_writes_every_tag(two_short_runs):
    scalars = read_scalars(two_short_runs[0])
    missing = ATARI_TAGS - set(scalars)
    assert not missing, missing
    # 128 steps per env at a 100-step limit: every env truncates once, and no Pong game ends sooner
    assert len(scalars["charts/episodic_return"]) == 16
    assert all(length == 100 for _, length in scalars["charts/episodic_length"])
    game_returns = [ret for _, ret in scalars["charts/episodic_return"]]
    assert all(ret == int(ret) and -10 <= ret <= 3 for ret in game_returns), game_returns
    assert sum(ret < 0 for ret in game_returns) >= len(game_returns) // 2, game_returns
    assert [step for step, _ in scalars["losses/value_loss"]] == [1024, 2048]


def test_same_seed_gives_identical_losses_with_one_simulation_thread(two_short_runs):
    first, second = (read_scalars(d) for d in two_short_runs)
    for tag in sorted(ATARI_TAGS - {"charts/SPS"}):
        assert first[tag] == second[tag], tag


def test_saved_model_evaluates(two_short_runs, tmp_path):
    from cleanrl_utils.evaluate import evaluate

    model_path = os.path.join(two_short_runs[0], f"{SCRIPT}.cleanrl_model")
    returns = evaluate(model_path, episodes=2, seed=1)
    assert len(returns) == 2
    assert_evaluates_whole_games_of_its_weights(model_path, "actor", action=3, tmp_dir=str(tmp_path))


# 16 iterations of 16 envs x 16 steps: long enough to interrupt in the middle
# ---- learning ----


# Marked Pong frames: tests/test_ppo_atari_envpool.py's settings (the defaults except the game length, --update-epochs 2
# and fp32). Calibration on a 2-core AMD EPYC (Zen 4), last-20-game means at 20,480 steps: 44.0, 42.0, 47.6 on seeds
# 1, 2, 3 (first-20 means 10.9, 9.5, 11.7), about 36 s each; with the default 4 epochs 45.6, 46.3, 43.2 in 51 s (at
# 16,384 steps: 34.8, 37.5, 38.2).
def test_learns_to_read_the_newest_frame_of_the_env_it_acts_in(tmp_path):
    returns = marked_frame_returns(SCRIPT, *MARKED, "--seed", "1", log_dir=tmp_path)
    assert np.mean(returns[:20]) < 16, returns[:20]  # random play first
    assert np.mean(returns[-20:]) > 32, returns[-20:]  # above any policy that cannot see the band


OVERLAP_RUN = [
    "--env-id",
    "Pong-v5",
    "--total-timesteps",
    "4096",
    "--num-steps",
    "16",
    "--max-episode-steps",
    "60",
    "--overlap",
]


@pytest.fixture(scope="module")
def interrupted_overlap_run(tmp_path_factory):
    return run_interrupted(SCRIPT, OVERLAP_RUN, tmp_path_factory.mktemp("overlap"))


def test_overlap_sigint_checkpoints_and_resume_finishes_with_every_tag(interrupted_overlap_run):
    """Ctrl-C while the actor thread is collecting the next rollout: the iteration finishes, the checkpoint
    holds it, the dropped rollout is not counted; the resumed run logs each iteration once and every tag."""
    returncode, stdout, stderr, run_dir = interrupted_overlap_run
    assert returncode == 0 and "Traceback" not in stderr, stderr[-2000:]
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    assert f"checkpoint: {checkpoint_path}" in stdout
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    assert 1 <= checkpoint["iteration"] < 16 and checkpoint["global_step"] == checkpoint["iteration"] * 256

    result = run_script(SCRIPT, "--resume", checkpoint_path)
    assert result.returncode == 0, result.stderr[-2000:]
    scalars = read_scalars(run_dir)
    assert not ATARI_TAGS - set(scalars), ATARI_TAGS - set(scalars)
    assert [step for step, _ in scalars["charts/learning_rate"]] == [256 * i for i in range(1, 17)]
    assert torch.load(checkpoint_path, weights_only=True)["global_step"] == 4096


BAD_INPUT = [
    (["--async-batch-size", "32"], ["--async-batch-size", "32", "--num-envs", "16"]),
    (["--async-batch-size", "0"], ["--async-batch-size", "0"]),
    (["--num-envs", "4"], ["--async-batch-size must be in 1..--num-envs (4), got 8", "--async-batch-size 2"]),  # trial 6, Q9
    (["--async-batch-size", "7"], ["--async-batch-size 7", "1024"]),
    (["--num-threads", "-1"], ["--num-threads", "-1"]),
    # trial 19, W5: 100,000 threads aborted in C++ (exit 134) and left an empty run folder
    (["--num-threads", "100000"], ["--num-threads must be in 0..--num-envs (16)", "got 100000"]),
    (["--num-threads", "17"], ["--num-threads must be in 0..--num-envs (16)", "got 17"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3", "1024"]),
    (["--num-steps", "1", "--num-minibatches", "1"], ["--num-steps", ">= 2", "got 1"]),
    (["--num-steps", "0"], ["--num-steps", "0"]),
]


def test_one_step_per_env_leaves_nothing_to_learn_from():
    """Why --num-steps 1 is refused (#5): each env's last row in a rollout has no result, so a rollout in which
    every env appears once has no valid row; with two appearances each, the first ones are valid."""
    env_ids = torch.tensor([[0, 1, 2, 3]])
    zeros = torch.zeros(1, 4)
    no = torch.zeros(1, 4, dtype=torch.bool)
    _, valid = compute_gae_async(env_ids, zeros, zeros, no, no, 4, 0.99, 0.95)
    assert not valid.any()
    env_ids = torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]])
    _, valid = compute_gae_async(
        env_ids, zeros.repeat(2, 1), zeros.repeat(2, 1), no.repeat(2, 1), no.repeat(2, 1), 4, 0.99, 0.95
    )
    assert valid[0].all() and not valid[1].any()
