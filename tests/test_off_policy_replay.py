"""The replay rules of the off-policy continuous-control scripts (SAC, TD3, DDPG), each with its own ReplayBuffer,
against a brute-force per-episode reconstruction of real EnvPool Hopper trajectories: forced truncations (a 25-step
limit) and real terminations (the hopper falls), stale steps never stored, done = 1 only at terminations, the real
last observation kept at truncations, ring wrap-around, sampling, and the state round trip. Then the same rules on
what a real run of each script left in its checkpoint."""

import importlib
import os

import numpy as np
import pytest
import torch
from helpers import only_run_dir, run_script

SCRIPTS = ["sac_continuous_action_envpool", "td3_continuous_action_envpool", "ddpg_continuous_action_envpool"]


def play_random(script, capacity: int, num_envs: int = 3, steps: int = 400, limit: int = 25, seed: int = 3):
    """Random play in real EnvPool Hopper-v4, fed to the script's ReplayBuffer the way the script feeds it. Returns
    the buffer and the raw record: every observation EnvPool returned (T+1, N, 11), every step's action, reward,
    terminated and truncated flag (T, N)."""
    envs = script.make_env("Hopper-v4", num_envs, seed, limit)
    rb = script.ReplayBuffer(capacity, 11, 3, torch.device("cpu"))
    rng = np.random.default_rng(seed)
    obs, _ = envs.reset()
    record = {"obs": [obs], "actions": [], "rewards": [], "term": [], "trunc": []}
    prev_episode_over = np.zeros(num_envs, dtype=bool)
    for _ in range(steps):
        actions = rng.uniform(-1, 1, (num_envs, 3)).astype(np.float32)
        next_obs, rewards, term, trunc, _ = envs.step(actions)
        rb.add(obs, actions, rewards, next_obs, term, prev_episode_over, num_envs)
        prev_episode_over = term | trunc
        obs = next_obs
        for name, value in (("obs", next_obs), ("actions", actions), ("rewards", rewards), ("term", term), ("trunc", trunc)):
            record[name].append(np.array(value, copy=True))
    envs.close()
    return rb, {name: np.stack(values) for name, values in record.items()}


def expected_transitions(record: dict) -> tuple[list, dict]:
    """Brute force: walk each env's stream episode by episode. An episode is observations o_0 .. o_L (o_L returned by
    the boundary step) and the L transitions between them; the step after a boundary belongs to no episode (it leads
    from o_L to the next episode's first observation). Returns the transitions ordered by (step, env), each as
    (t, env, obs, action, reward, next_obs, done, kind), and the count of each kind of ending."""
    num_steps, num_envs = record["actions"].shape[:2]
    transitions, kinds = [], {"termination": 0, "truncation": 0, None: 0}
    for env in range(num_envs):
        t = 0
        while t < num_steps:
            term, trunc = bool(record["term"][t, env]), bool(record["trunc"][t, env])
            kind = "termination" if term else ("truncation" if trunc else None)
            kinds[kind] += 1
            fields = (record["obs"][t, env], record["actions"][t, env], record["rewards"][t, env], record["obs"][t + 1, env])
            transitions.append((t, env, *fields, float(term), kind))
            if term or trunc:
                if t + 1 < num_steps:  # the stale step: EnvPool ignored its action, paid 0, returned the reset obs
                    assert record["rewards"][t + 1, env] == 0
                t += 2
            else:
                t += 1
    transitions.sort(key=lambda transition: transition[:2])
    return transitions, kinds


def as_rows(transitions) -> np.ndarray:
    """The buffer's row layout (obs | action | reward | next_obs | done), float32, built here independently."""
    return np.array(
        [
            np.concatenate([obs, action, [reward], next_obs, [done]])
            for _, _, obs, action, reward, next_obs, done, _ in transitions
        ],
        dtype=np.float32,
    )


@pytest.mark.parametrize("name", SCRIPTS)
@pytest.mark.parametrize("capacity", [5000, 97])  # no wrap-around; the ring overwritten many times
def test_stored_transitions_match_a_per_episode_reconstruction(name, capacity):
    script = importlib.import_module(f"cleanrl.{name}")
    rb, record = play_random(script, capacity)
    transitions, kinds = expected_transitions(record)
    assert kinds["termination"] >= 10 and kinds["truncation"] >= 5, kinds  # both endings occur, many times
    expected = as_rows(transitions)
    stored = rb.rows.numpy()[: rb.size]
    if capacity < len(expected):  # the ring keeps the newest `capacity`, oldest at `pos`
        assert rb.size == capacity
        stored, expected = np.roll(stored, -rb.pos, axis=0), expected[-capacity:]
    np.testing.assert_array_equal(stored, expected)  # no stale transition, none missing, in order
    assert rb.env_steps == 400 * 3  # stale steps count as env steps (learning starts), not as transitions
    # Truncated transitions: done 0, next_obs the real last observation (not a reset one: a reset Hopper's
    # velocities are within +-0.005). Terminations: done 1, and the hopper really fell (height or angle).
    truncated = [row for row, t in zip(as_rows(transitions), transitions) if t[-1] == "truncation"]
    terminated = [row for row, t in zip(as_rows(transitions), transitions) if t[-1] == "termination"]
    assert all(row[-1] == 0 and np.abs(row[-1 - 11 + 5 : -1]).max() > 0.005 for row in truncated)
    assert all(
        row[-1] == 1 and (row[-12] <= 0.7 or abs(row[-11]) >= 0.2 or np.abs(row[-11:-1]).max() >= 100) for row in terminated
    )


@pytest.mark.parametrize("name", SCRIPTS)
def test_sample_draws_whole_stored_rows_uniformly(name):
    script = importlib.import_module(f"cleanrl.{name}")
    rb, _ = play_random(script, capacity=97, steps=60)
    torch.manual_seed(0)
    obs, actions, rewards, next_obs, dones = rb.sample(20_000)
    assert obs.shape == (20_000, 11) and actions.shape == (20_000, 3) and rewards.shape == dones.shape == (20_000,)
    rows = torch.cat([obs, actions, rewards[:, None], next_obs, dones[:, None]], dim=1).numpy()
    stored = {row.tobytes(): i for i, row in enumerate(rb.rows.numpy()[: rb.size])}
    drawn = np.array([stored[row.tobytes()] for row in rows])  # KeyError if a field came from another row
    counts = np.bincount(drawn, minlength=rb.size)
    assert counts.min() > 0 and counts.max() < 2 * counts.mean()  # all 97 drawn, about equally


@pytest.mark.parametrize("name", SCRIPTS)
def test_buffer_state_round_trips_and_refuses_a_foreign_one(name, tmp_path):
    script = importlib.import_module(f"cleanrl.{name}")
    rb, _ = play_random(script, capacity=97, steps=60)
    torch.save(rb.state_dict(), tmp_path / "rb.pt")
    restored = script.ReplayBuffer(97, 11, 3, torch.device("cpu"))
    restored.load_state_dict(torch.load(tmp_path / "rb.pt", weights_only=True))
    assert torch.equal(restored.rows, rb.rows) and (restored.pos, restored.size, restored.env_steps) == (rb.pos, rb.size, 180)
    empty = script.ReplayBuffer(97, 11, 3, torch.device("cpu"))
    empty.load_state_dict({})  # a checkpoint saved with --no-checkpoint-buffer
    assert empty.size == 0 and empty.env_steps == 0
    with pytest.raises(ValueError, match="saved rows"):
        script.ReplayBuffer(97, 17, 6, torch.device("cpu")).load_state_dict(rb.state_dict())  # HalfCheetah's width


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_real_run_stores_only_real_transitions(name, tmp_path):
    """What a run of the script itself left in its checkpoint's buffer (Hopper with a 20-step limit, 600 steps,
    learning from step 500 on): no transition leads to a reset observation (those are the stale ones), every episode's
    first transition is there, and every done row ends in a fallen hopper."""
    flags = ["--env-id", "Hopper-v4", "--max-episode-steps", "20", "--total-timesteps", "600", "--learning-starts", "500"]
    flags += ["--num-envs", "2", "--torch-threads", "1", "--log-dir", str(tmp_path), "--seed", "5"]
    result = run_script(name, *flags, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoint = torch.load(os.path.join(only_run_dir(tmp_path), "checkpoint.pt"), weights_only=True)
    rows = checkpoint["replay_buffer"]["rows"].numpy()
    obs, actions, next_obs, dones = rows[:, :11], rows[:, 11:14], rows[:, 15:26], rows[:, 26]
    reset_like = lambda x: (np.abs(x[:, 5:]).max(axis=1) <= 0.005) & (np.abs(x[:, 0] - 1.25) <= 0.005)  # noqa: E731
    fallen = (next_obs[:, 0] <= 0.7) | (np.abs(next_obs[:, 1]) >= 0.2) | (np.abs(next_obs[:, 1:]).max(axis=1) >= 100)
    assert not reset_like(next_obs).any()
    assert reset_like(obs).sum() >= 2 + dones.sum()  # every episode's first transition is stored
    # done = 1 exactly on the falls, one on the time limit's step included (cleanrl_utils.envpool_time_limit)
    np.testing.assert_array_equal(fallen, dones == 1)
    assert dones.sum() >= 3
    assert len(rows) < 600 and checkpoint["replay_buffer"]["env_steps"] == 600
    assert np.abs(actions).max() <= 1.0  # the env's bounds: what the env executed


@pytest.mark.parametrize("name", SCRIPTS)
def test_saved_buffer_holds_only_the_filled_rows_and_restores_to_full_capacity(name, tmp_path):
    """A 100,000-row buffer holding 60 steps of 3 envs (stale steps left out): its saved state is the filled rows
    only, so the file is about their size, not the capacity's 10.8 MB (#6). Restored into a buffer of the same
    capacity, it has its rows and position back and goes on filling past them."""
    script = importlib.import_module(f"cleanrl.{name}")
    rb, _ = play_random(script, capacity=100_000, steps=60)
    filled_bytes = rb.size * rb.rows.shape[1] * 4
    torch.save(rb.state_dict(), tmp_path / "rb.pt")
    assert 150 <= rb.size <= 180 and filled_bytes <= os.path.getsize(tmp_path / "rb.pt") <= filled_bytes + 4096
    restored = script.ReplayBuffer(100_000, 11, 3, torch.device("cpu"))
    restored.load_state_dict(torch.load(tmp_path / "rb.pt", weights_only=True))
    assert restored.rows.shape == (100_000, rb.rows.shape[1]) and torch.equal(restored.rows, rb.rows)
    assert (restored.pos, restored.size, restored.env_steps) == (rb.pos, rb.size, rb.env_steps)
    new_obs = np.ones((3, 11), np.float32)
    restored.add(new_obs, np.zeros((3, 3)), np.ones(3), new_obs, np.zeros(3), np.zeros(3, dtype=bool), 3)
    assert restored.size == rb.size + 3 and torch.equal(restored.rows[: rb.size], rb.rows[: rb.size])
    assert (restored.rows[rb.size : rb.size + 3, :11] == 1).all()
