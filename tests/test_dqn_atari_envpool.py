"""Tests of cleanrl/dqn_atari_envpool.py: the frame-deduplicated replay buffer against a brute-force
per-episode reconstruction of real EnvPool games (life losses, game overs, truncations, ring wrap-around),
the TD target, short real runs (tags, determinism, checkpoint with and without the buffer, resume), the
saved model evaluated and filmed, and bad input."""

import os

import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from helpers import (
    assert_evaluates_whole_games_of_its_weights,
    assert_one_error_line,
    decoded_video,
    folder_state,
    only_run_dir,
    read_scalars,
    run_on_marked_frames,
    run_script,
)

from cleanrl.dqn_atari_envpool import QNetwork, ReplayBuffer, make_env, td_loss
from cleanrl_utils.steps import updates_due

SCRIPT = "dqn_atari_envpool"


def play_random(num_envs: int, steps: int, capacity: int, max_episode_steps: int = 140, seed: int = 3):
    """Random play in real EnvPool Breakout, fed to a ReplayBuffer the way the script feeds it. Returns the
    buffer and the raw record: every observation stack EnvPool returned (T+1, N, 4, 84, 84) and every step's
    action, reward, terminated, truncated and game-over flag (T, N)."""
    envs = make_env("Breakout-v5", num_envs, seed, max_episode_steps)
    rb = ReplayBuffer(capacity * num_envs, num_envs)
    obs, _ = envs.reset()
    rb.start_games(obs)
    rng = np.random.default_rng(seed)
    record = {"obs": [obs.copy()], "actions": [], "rewards": [], "term": [], "trunc": [], "game_over": []}
    prev_episode_over = np.zeros(num_envs, dtype=bool)
    for _ in range(steps):
        actions = rng.integers(0, envs.single_action_space.n, num_envs)
        next_obs, rewards, term, trunc, info = envs.step(actions)
        rb.add(actions, rewards, term, prev_episode_over, next_obs, info["elapsed_step"] == 0)
        prev_episode_over = term | trunc
        for name, value in (("obs", next_obs), ("actions", actions), ("rewards", rewards), ("term", term), ("trunc", trunc)):
            record[name].append(np.array(value, copy=True))
        record["game_over"].append(info["terminated"].astype(bool))
    envs.close()
    return rb, {name: np.stack(values) for name, values in record.items()}


def episodes_of(record: dict, env: int) -> list[dict]:
    """Brute force, one env: cut its stream into episodes. An episode is the list of its observation indices
    o_0 .. o_L (o_L is the boundary step's observation, its real last one) and its L transitions. The step after a
    boundary is not part of any episode: it leads from o_L to the next episode's first observation."""
    episodes, current = [], {"obs": [0], "transitions": []}
    num_steps = len(record["actions"])
    t = 0
    while t < num_steps:
        term, trunc = bool(record["term"][t, env]), bool(record["trunc"][t, env])
        current["obs"].append(t + 1)
        current["transitions"].append(
            dict(t=t, action=record["actions"][t, env], reward=record["rewards"][t, env], done=term, kind=None)
        )
        if term or trunc:
            current["transitions"][-1]["kind"] = (
                "game over" if record["game_over"][t, env] else ("life" if term else "truncation")
            )
            episodes.append(current)
            if t + 1 < num_steps:  # the stale step: action ignored, reward 0
                assert record["rewards"][t + 1, env] == 0
            current = {"obs": [t + 2], "transitions": []}
            t += 2
        else:
            t += 1
    episodes.append(current)
    return episodes


@pytest.mark.parametrize("capacity", [2000, 97])  # no wrap-around; the ring overwritten many times
def test_replay_matches_per_episode_reconstruction(capacity):
    num_envs, steps = 3, 1500
    rb, record = play_random(num_envs, steps, capacity)
    oldest = rb.num_obs - capacity + ReplayBuffer.STACK - 1  # the buffer's documented window: frames t-3 .. t+1 kept
    kinds, expected = {}, {}
    for env in range(num_envs):
        for episode_id, episode in enumerate(episodes_of(record, env)):
            for transition in episode["transitions"]:
                t = transition["t"]
                kinds[transition["kind"]] = kinds.get(transition["kind"], 0) + 1
                # A boundary transition's next observation is the episode's real last one, a continuation of the
                # stack (not the reset observation of the next episode): what a truncation bootstraps from.
                assert (record["obs"][t + 1, env, :3] == record["obs"][t, env, 1:]).all()
                if t >= oldest:
                    expected[(t, env)] = transition
    assert kinds.get("life", 0) > 10 and kinds.get("game over", 0) >= 3 and kinds.get("truncation", 0) >= 3, kinds

    # Every stack the buffer can rebuild equals the one EnvPool returned, bit for bit (stale steps' too).
    t_all = np.arange(max(oldest, 0), rb.num_obs)
    for env in range(num_envs):
        rebuilt = rb.stacks(t_all, np.full_like(t_all, env))
        np.testing.assert_array_equal(rebuilt, record["obs"][t_all, env])

    # The buffer samples exactly the reference transitions: none stale, none lost, none spanning two episodes.
    np.random.seed(0)
    t, env = rb.sample_indices(50_000)
    drawn = set(zip(t.tolist(), env.tolist()))
    assert drawn == set(expected), (len(drawn - set(expected)), len(set(expected) - drawn))
    # ... and stores each as the reference has it: stack, next stack, action, reward, done flag (in chunks).
    keys = sorted(expected)
    for start in range(0, len(keys), 500):
        t, env = (np.array(column) for column in zip(*keys[start : start + 500]))
        np.testing.assert_array_equal(rb.stacks(t, env), record["obs"][t, env])
        np.testing.assert_array_equal(rb.stacks(t + 1, env), record["obs"][t + 1, env])
        chunk = [expected[key] for key in keys[start : start + 500]]
        slots = t % rb.capacity
        np.testing.assert_array_equal(rb.actions[slots, env], [transition["action"] for transition in chunk])
        np.testing.assert_array_equal(rb.rewards[slots, env], [transition["reward"] for transition in chunk])
        # 1 at terminations (life loss included), 0 at truncations
        np.testing.assert_array_equal(rb.dones[slots, env], [transition["done"] for transition in chunk])
    # sample() returns the same kind of rows as tensors
    obs, actions, rewards, next_obs, dones = rb.sample(256, torch.device("cpu"))
    assert obs.dtype == torch.uint8 and obs.shape == (256, 4, 84, 84) and next_obs.shape == obs.shape
    assert dones.dtype == torch.bool and rewards.dtype == torch.float32


def test_replay_state_dict_round_trip_and_memory(tmp_path):
    rb, _ = play_random(2, 300, 64)
    torch.save({"replay_buffer": rb.state_dict()}, tmp_path / "buffer.pt")
    copy = ReplayBuffer(128, 2)
    copy.load_state_dict(torch.load(tmp_path / "buffer.pt", weights_only=True)["replay_buffer"])
    assert copy.num_obs == 301 and copy.env_steps == 600
    np.random.seed(5)
    first = rb.sample(64, torch.device("cpu"))
    np.random.seed(5)
    second = copy.sample(64, torch.device("cpu"))
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    np.random.seed(5)  # --no-uint8-obs: the same batch, observations as float32 0..255
    as_float = copy.sample(64, torch.device("cpu"), torch.float32)
    assert as_float[0].dtype == as_float[3].dtype == torch.float32
    assert torch.equal(as_float[0], first[0].float()) and torch.equal(as_float[3], first[3].float())
    with pytest.raises(ValueError, match="saved ring of 64 slots per env, this run's 128"):
        ReplayBuffer(256, 2).load_state_dict(rb.state_dict())
    # 1M transitions: one 84x84 frame each plus a few bytes, under the 8 GiB goal
    assert ReplayBuffer.bytes_needed(1_000_000) < 7.1e9
    assert rb.frames.nbytes == 128 * 84 * 84


def test_a_young_buffer_saves_only_its_filled_slots_and_restores_to_full_capacity():
    # was: every checkpoint held the whole capacity (7 GB for a 1M buffer from the first save on)
    rb, _ = play_random(2, 40, 64)  # 41 observations per env, in a ring of 64
    state = rb.state_dict()
    assert state["frames"].shape == (41, 2, 84, 84) and state["capacity"] == 64
    copy = ReplayBuffer(128, 2)
    copy.load_state_dict(state)
    assert copy.frames.shape == (64, 2, 84, 84) and np.array_equal(copy.frames[:41], rb.frames[:41])
    np.random.seed(7)
    first = rb.sample(32, torch.device("cpu"))
    np.random.seed(7)
    for a, b in zip(first, copy.sample(32, torch.device("cpu"))):
        assert torch.equal(a, b)
    for _ in range(30):  # the restored ring goes on filling and wraps like the original
        for buffer in (rb, copy):
            buffer.add(
                np.zeros(2),
                np.zeros(2),
                np.zeros(2, bool),
                np.zeros(2, bool),
                np.full((2, 4, 84, 84), 9, np.uint8),
                np.zeros(2, bool),
            )
    for name in ReplayBuffer.ARRAYS:
        assert np.array_equal(getattr(copy, name), getattr(rb, name)), name


def test_td_target_zero_on_termination_bootstrap_on_truncation():
    """Hand numbers: a Q-network whose outputs are fixed per observation."""

    class FixedQ(torch.nn.Module):
        def __init__(self, table: dict[int, list[float]]):
            super().__init__()
            self.table = table
            self.scale = torch.nn.Parameter(torch.ones(()))

        def forward(self, obs):  # obs[:, 0, 0, 0] names the observation
            return self.scale * torch.tensor([self.table[int(o)] for o in obs[:, 0, 0, 0]])

    obs = torch.zeros(3, 4, 84, 84, dtype=torch.uint8)
    next_obs = torch.zeros(3, 4, 84, 84, dtype=torch.uint8)
    obs[:, 0, 0, 0] = torch.tensor([0, 1, 2])
    next_obs[:, 0, 0, 0] = torch.tensor([10, 11, 12])
    online = FixedQ({0: [1.0, 2.0], 1: [3.0, 4.0], 2: [5.0, 6.0]})
    target = FixedQ({10: [7.0, 9.0], 11: [8.0, -1.0], 12: [0.5, 0.25]})
    actions = torch.tensor([1, 0, 1], dtype=torch.uint8)
    rewards = torch.tensor([1.0, -1.0, 0.0])
    dones = torch.tensor([True, False, False])  # a termination, a truncation (done 0), a mid-episode step
    loss, q_values = td_loss(online, target, obs, actions, rewards, next_obs, dones, gamma=0.9)
    targets = np.array([1.0, -1.0 + 0.9 * 8.0, 0.0 + 0.9 * 0.5])
    chosen = np.array([2.0, 3.0, 6.0])
    np.testing.assert_allclose(q_values.numpy(), chosen, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss.item(), np.mean((chosen - targets) ** 2), rtol=1e-5, atol=1e-6)


def test_updates_follow_the_global_step():
    for num_envs in (1, 3, 8):
        steps = range(num_envs, 4000 + 1, num_envs)
        assert sum(updates_due(s, num_envs, 4) for s in steps) == steps[-1] // 4
        assert sum(updates_due(s, num_envs, 1000) for s in steps) == steps[-1] // 1000


def test_q_network_levers_agree():
    torch.manual_seed(0)
    obs = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8)
    reference = QNetwork(6)
    fast = QNetwork(6, bf16=True, channels_last=True)
    fast.load_state_dict(reference.state_dict())
    with torch.no_grad():
        exact = reference(obs)
        assert torch.equal(exact, reference(obs.float()))  # uint8 in, or float32 in: the same numbers
        approx = fast(obs)
    assert approx.dtype == torch.float32
    assert (approx - exact).abs().max() < 0.05 * exact.abs().max() + 1e-3
    with torch.no_grad():  # acting: bf16=False for one call gives the fp32 network's values (up to channels-last)
        acting = fast(obs, bf16=False)
    assert (acting - exact).abs().max() < 1e-4


def test_fused_adam_takes_the_same_step():
    torch.manual_seed(0)
    obs = torch.randint(0, 256, (32, 4, 84, 84), dtype=torch.uint8)
    actions, rewards = torch.randint(0, 4, (32,)), torch.randn(32)
    dones = torch.rand(32) < 0.1
    networks = []
    for fused in (False, True):
        torch.manual_seed(1)
        q_network, target_network = QNetwork(4), QNetwork(4)
        optimizer = torch.optim.Adam(q_network.parameters(), lr=1e-4, fused=fused)
        for _ in range(3):
            loss, _ = td_loss(q_network, target_network, obs, actions, rewards, obs, dones, 0.99)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        networks.append(q_network)
    for plain, fused in zip(*(network.parameters() for network in networks)):
        torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-6)


# The plumbing runs: a minibatch of 8, not 32: the update is most of a run's time, and these tests count updates,
# steps and files, not what is learnt
SHORT = ["--env-id", "Breakout-v5", "--total-timesteps", "3000", "--learning-starts", "1000", "--buffer-size", "4000"]
SHORT += ["--exploration-fraction", "0.5", "--target-network-frequency", "500", "--torch-threads", "1", "--batch-size", "8"]


@pytest.fixture(scope="module")
def two_short_runs(tmp_path_factory) -> list[str]:
    """The same 2,000-step run (1,000 learning steps) twice, the first saving its model (a flag that does not
    change training): the run folders."""
    short = [*SHORT[:2], "--total-timesteps", "2000", *SHORT[4:]]
    run_dirs = []
    for flags in (["--save-model"], []):
        log_dir = tmp_path_factory.mktemp("short")
        result = run_script(SCRIPT, *short, *flags, "--log-dir", str(log_dir), timeout=300)
        assert result.returncode == 0, result.stderr
        run_dirs.append(only_run_dir(log_dir))
    return run_dirs


def test_short_run_tags_and_determinism(two_short_runs):
    losses = []
    for run_dir in two_short_runs:
        scalars = read_scalars(run_dir)
        for tag in ("charts/episodic_return", "charts/SPS", "losses/td_loss", "losses/q_values", "charts/epsilon"):
            assert scalars.get(tag), tag
        losses.append(scalars["losses/td_loss"] + scalars["losses/q_values"])  # logged at step 2,000, after 250 updates
    assert losses[0] == losses[1] and len(losses[0]) == 2
    epsilon = read_scalars(two_short_runs[0])["charts/epsilon"]
    assert epsilon[0] == (
        1000,
        pytest.approx(1.0 - 0.99 * 999 / 1000),
    )  # 1 -> 0.01 over half the 2,000 steps; the step about to be taken
    assert epsilon[-1][1] == pytest.approx(0.01)


def test_checkpoint_holds_the_buffer_and_resume_continues_with_it(tmp_path):
    # a 100-step time limit: the replay then holds stale steps after life losses and after time limits
    result = run_script(SCRIPT, *SHORT, "--max-episode-steps", "100", "--log-dir", str(tmp_path / "with"), timeout=300)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path / "with")
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    assert checkpoint["replay_buffer"]["env_steps"] == 3000 and checkpoint["replay_buffer"]["num_obs"] == 3001
    assert checkpoint["replay_buffer"]["frames"].shape == (3001, 1, 84, 84)  # the filled slots of 4,000
    assert_replay_keeps_every_stale_step_out(checkpoint["replay_buffer"])
    with_buffer_bytes = os.path.getsize(checkpoint_path)

    # Resumed with its buffer: training goes on at once (a loss logged within the first 1,000 steps).
    result = run_script(SCRIPT, "--resume", checkpoint_path, "--total-timesteps", "4000", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "replay buffer: 3,000 env steps restored" in result.stdout
    steps = [step for step, _ in read_scalars(run_dir)["losses/td_loss"]]
    assert 4000 in steps

    # --no-checkpoint-buffer (may be set on resume): a small file; a run resumed from it refills first.
    result = run_script(SCRIPT, "--resume", checkpoint_path, "--total-timesteps", "4500", "--no-checkpoint-buffer")
    assert result.returncode == 0, result.stderr
    small = os.path.getsize(checkpoint_path)
    assert with_buffer_bytes - small >= 3001 * 84 * 84  # the filled frames (the rest: two Q-networks and Adam, 27 MB)
    assert torch.load(checkpoint_path, weights_only=True)["replay_buffer"] == {}
    adam_steps = lambda: int(torch.load(checkpoint_path, weights_only=True)["optimizer_state_dict"]["state"][0]["step"])  # noqa: E731
    before = adam_steps()
    assert before == (4500 - 1000) // 4  # one gradient step per 4 env steps after --learning-starts
    result = run_script(SCRIPT, "--resume", checkpoint_path, "--total-timesteps", "6000")
    assert result.returncode == 0, result.stderr
    assert "replay buffer: refilled from empty" in result.stdout
    assert adam_steps() == before + (6000 - 5500) // 4  # none until 1,000 new env steps refilled the buffer


def test_saved_model_evaluates_and_films(two_short_runs, tmp_path):
    model = os.path.join(two_short_runs[0], "dqn_atari_envpool.cleanrl_model")
    from cleanrl_utils.evaluate import evaluate

    video_dir = str(tmp_path / "videos")
    returns = evaluate(model, episodes=2, seed=1, video_dir=video_dir, epsilon=0.05)
    assert len(returns) == 2
    # RIGHT scores 2 and 3 points in these two games, 0 and 2 of them before the first life is lost
    assert_evaluates_whole_games_of_its_weights(model, "q_head", action=2, tmp_dir=str(tmp_path))
    frames = decoded_video(os.path.join(video_dir, "eval-episode-0.mp4"))
    assert frames.shape[0] > 10 and frames.std() > 1


# Marked Pong frames (tests/marked_frames.py): +1 for RIGHT on a white band, LEFT on a black one. Random play earns
# 64/6 = 10.7 in a 64-step game, a policy that ignores the band at most 32, one that reads it 64. 4 envs, learning
# from step 1,000 with epsilon at 0.01 from step 750, fp32 (as calibrated, on every CPU kind). Calibration, last-20-game
# means: at 3,000 steps 63.25, 63.65, 63.30 on seeds 1, 2, 3 (at 4,000: 63.40, 63.55, 63.45; seed 1 reached 56 at
# step 1,816 and 64 at 2,076). First-8-game means 16.0, 19.8, 17.6: epsilon-greedy on an untrained network, whose
# fixed argmax is RIGHT or LEFT about half the time, blind to the band.
MARKED = ["--env-id", "Pong-v5", "--max-episode-steps", "64", "--total-timesteps", "3000", "--learning-starts", "1000"]
MARKED += ["--buffer-size", "3000", "--exploration-fraction", "0.25", "--num-envs", "4", "--precision", "fp32"]


def test_learns_to_read_the_newest_frame(tmp_path):
    result = run_on_marked_frames(SCRIPT, *MARKED, "--seed", "1", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    returns = [value for _, value in read_scalars(only_run_dir(tmp_path))["charts/episodic_return"]]
    assert np.mean(returns[:8]) < 32, returns[:8]  # blind play first
    assert np.mean(returns[-20:]) > 48, returns[-20:]  # far above any policy that cannot see the band


BAD_INPUT = [
    (["--buffer-size", "16", "--batch-size", "32"], ["--buffer-size 16", "--batch-size 32"]),
    (["--learning-starts", "20000", "--total-timesteps", "10000"], ["--learning-starts 20000", "10000"]),
    (["--end-e", "1.5"], ["--end-e", "[0, 1]", "1.5"]),
    (["--torch-threads", "100000"], ["--torch-threads must be in 0..", "got 100000"]),  # trial 11 N4: a segfault
    (["--exploration-fraction", "0"], ["--exploration-fraction", "(0, 1]"]),
    (["--train-frequency", "0"], ["--train-frequency", "positive"]),
    (["--buffer-size", "100", "--num-envs", "8", "--batch-size", "8"], ["--buffer-size 100", "--num-envs 8"]),
    (["--env-id", "Breakout-v4"], ["--env-id 'Breakout-v4'", "Breakout-v5"]),
    (["--env-id", "Hopper-v4"], ["MuJoCo", "Atari"]),
    (["--buffer-size", "100000000"], ["replay buffer", "GiB", "--buffer-size"]),
]


def test_divergence_stops_before_the_checkpoint_is_overwritten(tmp_path):
    """Finiteness is checked where the script logs (every 1,000 steps) and before every checkpoint, never on other
    steps (no per-step host sync): here the first check after the weights blow up is at the iteration-1,100 save."""
    result = run_script(SCRIPT, *SHORT, "--learning-rate", "1e30", "--checkpoint-every", "100", "--log-dir", str(tmp_path))
    assert_one_error_line(result, ["non-finite", "last good checkpoint", "checkpoint.pt"], ignore_warnings=True)
    checkpoint = torch.load(os.path.join(only_run_dir(tmp_path), "checkpoint.pt"), weights_only=True)
    assert checkpoint["iteration"] < 3000
    assert all(torch.isfinite(p).all() for p in checkpoint["model_state_dict"].values())


def test_ctrl_c_saves_the_buffer_and_exits_cleanly(tmp_path):
    from helpers import run_interrupted

    args = [
        *SHORT[:2],
        "--torch-threads",
        "1",
        "--total-timesteps",
        "200000",
        "--learning-starts",
        "1000",
        "--buffer-size",
        "4000",
    ]
    returncode, stdout, stderr, run_dir = run_interrupted(SCRIPT, args, tmp_path)
    assert returncode == 0, stderr
    assert "stopped at iteration" in stdout and "Traceback" not in stderr
    checkpoint = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    assert checkpoint["replay_buffer"]["num_obs"] == checkpoint["iteration"] + 1  # one reset observation, one per step


def test_extending_a_run_keeps_its_epsilon_schedule_and_a_resume_may_end_before_learning_starts(tmp_path):
    """#4: a 2,000-step run whose epsilon decays over all of it (--exploration-fraction 1), resumed to 4,000 steps,
    keeps epsilon at --end-e: the schedule is that of the first --total-timesteps (re-planned for 4,000 it would be
    back at 0.26 at step 3,000). A resume to 1,500 steps (less than --learning-starts 1,900) is allowed: the run has
    nothing left to do and says so."""
    flags = ["--env-id", "Breakout-v5", "--total-timesteps", "2000", "--learning-starts", "1900", "--buffer-size", "4000"]
    flags += ["--exploration-fraction", "1", "--torch-threads", "1", "--batch-size", "8", "--log-dir", str(tmp_path)]
    result = run_script(SCRIPT, *flags, timeout=300)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    path = os.path.join(run_dir, "checkpoint.pt")
    before = folder_state(run_dir)
    result = run_script(SCRIPT, "--resume", path, "--total-timesteps", "1500", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "already ran 2000 iterations, more than the 1500 this --total-timesteps asks for" in result.stdout
    assert folder_state(run_dir) == before  # nothing restored or written: no new events file, the model as it was
    result = run_script(SCRIPT, "--resume", path, "--total-timesteps", "4000", timeout=300)
    assert result.returncode == 0, result.stderr
    epsilon = read_scalars(run_dir)["charts/epsilon"]
    assert [step for step, _ in epsilon] == [1000, 2000, 3000, 4000]
    assert epsilon[0][1] == pytest.approx(1.0 - 0.99 * 999 / 2000) and epsilon[1][1] == pytest.approx(1.0 - 0.99 * 1999 / 2000)
    assert epsilon[2][1] == epsilon[3][1] == pytest.approx(0.01)
    assert torch.load(path, weights_only=True)["args"]["exploration_steps"] == 2000


def test_a_resumed_buffer_is_not_counted_twice_by_the_memory_check(monkeypatch):
    """#9: the loaded checkpoint holds the buffer the resumed run takes over, so only the rest must be free. With
    less free memory than the whole buffer, a fresh run (or a resume without a saved buffer) is refused; a resume
    holding the buffer is not."""
    from cleanrl.dqn_atari_envpool import Args, validate_args
    from cleanrl_utils import checks

    args = Args(buffer_size=100_000, total_timesteps=3000, learning_starts=1000)
    needed = ReplayBuffer.bytes_needed(100_000)
    full_ring = ReplayBuffer(100_000, 1)
    full_ring.num_obs = full_ring.capacity  # a ring filled once: saved whole, taken over without a copy
    checkpoint = {"replay_buffer": full_ring.state_dict()}  # zero pages: takes no memory
    assert sum(v.nbytes for v in checkpoint["replay_buffer"].values() if torch.is_tensor(v)) == needed
    young = {"replay_buffer": ReplayBuffer(100_000, 1).state_dict()}  # copied into the new ring: holds nothing
    monkeypatch.setattr(checks, "available_memory_bytes", lambda: needed // 4)
    validate_args(args, checkpoint)
    for fresh_or_no_buffer in (None, {"replay_buffer": {}}, young):
        with pytest.raises(SystemExit, match="error: the replay buffer needs 0.7 GiB, more than"):
            validate_args(args, fresh_or_no_buffer)


def assert_replay_keeps_every_stale_step_out(replay: dict) -> None:
    """Wired through the main loop (issue 25: its stale flag replaced by all-false went unnoticed): in the replay of a
    real run, a transition is sampleable exactly when the one before it did not end an episode: neither a termination
    or life loss (stored done) nor a game reset (time limit or game over: the stale step returns the reset
    observation, which starts a game). Both kinds, and a time limit, must have happened."""
    dones, valid, starts = (replay[name].numpy() for name in ("dones", "valid", "game_start"))
    num_obs = int(replay["num_obs"])
    assert num_obs <= len(dones)  # no ring wrap: slot k is observation k
    for env in range(dones.shape[1]):
        for k in range(num_obs - 1):  # transition k leaves observation k
            stale = k > 0 and (dones[k - 1, env] or starts[k + 1, env])
            assert valid[k, env] == (not stale), (env, k)
        assert not valid[num_obs - 1, env]  # the newest observation has no transition yet
    life_losses = dones[: num_obs - 2] & ~starts[2:num_obs]
    time_limits = starts[2:num_obs] & ~dones[: num_obs - 2]
    assert life_losses.any() and time_limits.any(), (life_losses.sum(), time_limits.sum())
