"""Play a saved model and report per-episode returns, optionally filming the episodes.

    python -m cleanrl_utils.evaluate --model-path runs/<run>/ppo_atari_envpool.cleanrl_model --episodes 10
    python -m cleanrl_utils.evaluate --model-path ... --episodes 2 --capture-video   # MP4s beside the model
    python -m cleanrl_utils.evaluate --model-path runs/<run> --greedy   # every kept checkpoint, and the best

A folder evaluates each `checkpoint-<step>.pt` a run kept with `--keep-checkpoints`, in training order, on the
same evaluation seed, and names the best: the "best mean test return during training" that Tianshou's tables
report, next to which a run's final training return is the stricter figure.

A `.cleanrl_model` file holds the script name, its args and the weights (plus, for scripts that
normalise observations, the normaliser state), so nothing else needs to be passed. The network and
env factory are imported from the script itself: evaluation plays exactly what training played.
"""

import functools
import importlib
import itertools
import os
import sys
import traceback
from dataclasses import dataclass

import numpy as np
import torch
import tyro

from cleanrl_utils.checkpoint import kept_checkpoint_step, upgrade_saved_args
from cleanrl_utils.checks import MAX_SEED, hide_box_precision_warnings
from cleanrl_utils.hardware import native_bf16, this_machine
from cleanrl_utils.run import check_writable_dir, torch_threads
from cleanrl_utils.video import record_gymnasium_episodes


@dataclass
class EvalArgs:
    model_path: str
    """path of a `.cleanrl_model` file written by a script's `--save-model` (or a checkpoint), or a run folder whose
    kept checkpoints (`--keep-checkpoints`) are evaluated one by one"""
    episodes: int = 10
    """number of episodes (Atari: whole games) to play"""
    seed: int = 10_000
    """seed of the evaluation envs (differs from training seeds by default)"""
    greedy: bool = False
    """take the most likely action instead of sampling from the policy"""
    cuda: bool = True
    """use cuda when available"""
    capture_video: bool = False
    """write one MP4 per episode (Atari: the EnvPool games themselves; other envs: extra episodes played
    in the same Gymnasium env id, MuJoCo rendered headless through EGL)"""
    video_dir: str | None = None
    """where the videos go (default: `videos/` beside the model file)"""
    torch_threads: int = 0
    """torch intra-op threads on CPU (0: auto, OMP_NUM_THREADS if set, else one per core)"""
    epsilon: float = 0.05
    """DQN models: the probability of a random action, as CleanRL evaluates DQN (--greedy plays with 0); the PPO
    evaluators sample from their policy and ignore it"""


def load_flax_checkpoint(model_path: str) -> dict | None:
    """The JAX scripts save flax msgpack (same keys, flax params as "model_state_dict"); None if not one.
    A JAX *training* checkpoint (`checkpoint.msgpack`) holds the params inside its "train_state" and
    the observation statistics inside its "normalizers": they are read from there."""
    from flax.serialization import msgpack_restore

    try:
        with open(model_path, "rb") as f:
            checkpoint = msgpack_restore(f.read())
    except Exception:
        return None
    if not isinstance(checkpoint, dict) or "script" not in checkpoint:
        return None
    train_state, normalizers = checkpoint.get("train_state"), checkpoint.get("normalizers")
    if "model_state_dict" not in checkpoint and isinstance(train_state, dict) and "params" in train_state:
        checkpoint["model_state_dict"] = train_state["params"]
    if "obs_rms" not in checkpoint and isinstance(normalizers, dict) and "obs_rms" in normalizers:
        checkpoint["obs_rms"] = normalizers["obs_rms"]  # the continuous-action script's observation statistics
    if not isinstance(checkpoint.get("model_state_dict"), dict) or not isinstance(checkpoint.get("args"), dict):
        sys.exit(f"error: --model-path {model_path!r} is not a .cleanrl_model file or checkpoint (no weights or args)")
    return checkpoint


def load_checkpoint(model_path: str) -> dict:
    if not os.path.isfile(model_path):
        sys.exit(f"error: --model-path {model_path!r} does not exist")
    flax_checkpoint = load_flax_checkpoint(model_path)
    if flax_checkpoint is not None:
        upgrade_saved_args(flax_checkpoint["args"])
        return flax_checkpoint
    try:
        checkpoint = torch.load(model_path, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated or foreign file: say so in one line
        sys.exit(f"error: --model-path {model_path!r} is not a readable .cleanrl_model file ({type(error).__name__})")
    if not isinstance(checkpoint, dict) or "script" not in checkpoint or "model_state_dict" not in checkpoint:
        sys.exit(f"error: --model-path {model_path!r} is not a .cleanrl_model file (no script name or weights)")
    if not isinstance(checkpoint.get("args"), dict):
        sys.exit(f"error: --model-path {model_path!r} is not a .cleanrl_model file (no training args)")
    upgrade_saved_args(checkpoint["args"])
    return checkpoint


def bf16_here(train_args: dict, device: torch.device) -> bool:
    """Play at the trained precision where this machine computes bf16 natively, else in fp32: the
    weights are fp32 either way, and bf16 without native support runs several times slower."""
    return train_args.get("precision") == "bf16" and native_bf16(this_machine(device))[0]


# Envs played at once. One env per episode keeps short episodes from being over-represented, but 100,000 of them
# exhaust memory: past this many, episodes are played in rounds of one episode per env, on the same envs.
MAX_EVAL_ENVS = 32


def eval_env_count(episodes: int) -> int:
    """How many envs an evaluator makes for `episodes` episodes."""
    return min(episodes, MAX_EVAL_ENVS)


def play(
    envs, act, episodes: int, reset_seed: int | None = None, atari: bool = False, video_dir: str | None = None
) -> list[float]:
    """`episodes` episodes on `envs`, in rounds of one episode per env (the last round uses as many envs as it
    needs); returns in raw units, in episode order. Atari: whole games (all lives) from the unclipped
    `info["reward"]`, over at `info["terminated"]` or truncation; with `video_dir` each game is filmed from
    EnvPool's RGB renderer."""
    obs, _ = envs.reset() if reset_seed is None else envs.reset(seed=reset_seed)
    returns: list[float] = []
    while len(returns) < episodes:
        if returns:  # a new round: every env starts a fresh episode (the seeded RNGs go on, so new ones)
            obs, _ = envs.reset()
        playing = min(len(obs), episodes - len(returns))
        returns += play_round(envs, act, obs, playing, len(returns), atari, video_dir)
    envs.close()
    return returns


def play_round(envs, act, obs, playing: int, first_episode: int, atari: bool, video_dir: str | None) -> list[float]:
    """One episode in each of the first `playing` envs, from observations `obs` (the others run on, ignored)."""
    returns = np.zeros(playing)
    finished = np.zeros(playing, dtype=bool)
    writers = None
    if video_dir is not None:
        from cleanrl_utils.video import VideoWriter

        writers = [
            VideoWriter(os.path.join(video_dir, f"eval-episode-{first_episode + i}.mp4"), fps=15) for i in range(playing)
        ]
        for i, frame in enumerate(envs.render(env_ids=np.arange(playing))):
            writers[i].append(frame)
    while not finished.all():
        obs, reward, terminated, truncated, info = envs.step(act(obs))
        if atari:
            reward, ended = info["reward"], info["terminated"].astype(bool) | truncated
        else:
            ended = terminated | truncated
        returns += reward[:playing] * ~finished
        if writers is not None:
            filming = np.flatnonzero(~finished)
            for i, frame in zip(filming, envs.render(env_ids=filming)):
                writers[i].append(frame)
        finished |= ended[:playing]
    if writers is not None:
        for writer in writers:
            writer.close()
    return returns.tolist()


def torch_sampler(agent, device: torch.device, greedy: bool, normalize=None, low=None, high=None, greedy_action=None):
    """act(obs) for the torch scripts: optional frozen observation normalisation, sampled or greedy
    actions (`greedy_action(obs)`: the argmax; continuous actions: the Gaussian mean), clipped to the
    action bounds for continuous actions."""

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            obs_t = torch.as_tensor(normalize(obs) if normalize else obs, device=device)
            if obs_t.dtype == torch.float64:
                obs_t = obs_t.float()
            if greedy:
                action = greedy_action(obs_t) if greedy_action else agent.actor_mean(obs_t)
            else:
                action, _, _, _ = agent.get_action_and_value(obs_t)
        action = action.cpu().numpy()
        return np.clip(action, low, high).astype(np.float32) if low is not None else action

    return act


def evaluate_atari_envpool(
    script_name: str, checkpoint: dict, episodes: int, seed: int, device: torch.device, greedy: bool, video_dir=None
) -> list[float]:
    """PPO on EnvPool Atari: the sync script and its async and torch.distributed siblings share `make_env`, `Agent`
    and the checkpoint's weights, so one evaluator plays all three (imported from the script that trained)."""
    script = importlib.import_module(f"cleanrl.{script_name}")
    train_args = checkpoint["args"]
    render_mode = "rgb_array" if video_dir else None
    envs = script.make_env(
        train_args["env_id"], eval_env_count(episodes), seed, train_args["max_episode_steps"], render_mode=render_mode
    )
    agent = script.Agent(
        envs.single_action_space.n, bf16=bf16_here(train_args, device), channels_last=train_args["channels_last"] == "on"
    )
    agent.load_state_dict(checkpoint["model_state_dict"])
    agent.to(device).eval()
    act = torch_sampler(agent, device, greedy, greedy_action=lambda obs: agent.actor(agent.hidden(obs)).argmax(dim=-1))
    return play(envs, act, episodes, atari=True, video_dir=video_dir)


def evaluate_continuous_action_envpool(
    checkpoint: dict, episodes: int, seed: int, device: torch.device, greedy: bool, video_dir=None
) -> list[float]:
    """Observations are normalised with the saved statistics, frozen (never updated here). EnvPool's
    MuJoCo renderer needs an OpenGL context EnvPool 1.2 cannot create headless, so the videos are
    extra episodes in Gymnasium's env of the same id (same MuJoCo model)."""
    script = importlib.import_module("cleanrl.ppo_continuous_action_envpool")
    train_args = checkpoint["args"]
    envs = script.make_env(train_args["env_id"], eval_env_count(episodes), seed, train_args["max_episode_steps"])
    obs_shape, action_space = envs.single_observation_space.shape, envs.single_action_space
    agent = script.Agent(int(np.prod(obs_shape)), int(np.prod(action_space.shape)))
    agent.load_state_dict(checkpoint["model_state_dict"])
    agent.to(device).eval()
    obs_rms = script.RunningMeanStd(obs_shape)
    obs_rms.load_state_dict(checkpoint["obs_rms"])
    normalize = lambda obs: script.normalize_obs(obs, obs_rms, train_args["obs_clip"])  # noqa: E731
    act = torch_sampler(agent, device, greedy, normalize, action_space.low, action_space.high)
    returns = play(envs, act, episodes)
    if video_dir:
        record_gymnasium_episodes(train_args["env_id"], act, video_dir, episodes, seed)
    return returns


def evaluate_ppo(
    checkpoint: dict, episodes: int, seed: int, device: torch.device, greedy: bool, video_dir=None
) -> list[float]:
    script = importlib.import_module("cleanrl.ppo")
    train_args = checkpoint["args"]
    envs = script.make_env(train_args["env_id"], eval_env_count(episodes), "sync", train_args["max_episode_steps"])
    agent = script.Agent(envs.single_observation_space.shape[0], envs.single_action_space.n)
    agent.load_state_dict(checkpoint["model_state_dict"])
    agent.to(device).eval()
    act = torch_sampler(
        agent,
        device,
        greedy,
        normalize=lambda obs: obs.astype(np.float32),
        greedy_action=lambda obs: agent.actor(obs).argmax(dim=-1),
    )
    returns = play(envs, act, episodes, reset_seed=seed)
    if video_dir:
        record_gymnasium_episodes(train_args["env_id"], act, video_dir, episodes, seed)
    return returns


def evaluate_ppo_continuous_action(
    checkpoint: dict, episodes: int, seed: int, device: torch.device, greedy: bool, video_dir=None
) -> list[float]:
    script = importlib.import_module("cleanrl.ppo_continuous_action")
    train_args = checkpoint["args"]
    envs = script.make_env(train_args["env_id"], eval_env_count(episodes), "sync", train_args["max_episode_steps"])
    obs_shape, action_space = envs.single_observation_space.shape, envs.single_action_space
    agent = script.Agent(obs_shape[0], action_space.shape[0])
    agent.load_state_dict(checkpoint["model_state_dict"])
    agent.to(device).eval()
    obs_rms = script.RunningMeanStd(obs_shape)
    obs_rms.load_state_dict(checkpoint["obs_rms"])
    normalize = lambda obs: script.normalize_obs(obs, obs_rms, train_args["obs_clip"])  # noqa: E731
    act = torch_sampler(agent, device, greedy, normalize, action_space.low, action_space.high)
    returns = play(envs, act, episodes, reset_seed=seed)
    if video_dir:
        record_gymnasium_episodes(train_args["env_id"], act, video_dir, episodes, seed)
    return returns


def policy_calls():
    """0, 1, 2, ...: the JAX evaluators' key for call n is fold_in(PRNGKey(seed), n), a stream without end (a
    pre-split array of 10^6 keys ran out in long evaluations: 32 Atari games of up to 27,000 steps each)."""
    return itertools.count()


def evaluate_atari_envpool_xla_jax(
    checkpoint: dict, episodes: int, seed: int, device, greedy: bool, video_dir=None
) -> list[float]:
    """As evaluate_atari_envpool, for the JAX twin's flax parameters (runs on JAX's device)."""
    import jax

    script = importlib.import_module("cleanrl.ppo_atari_envpool_xla_jax")
    train_args = checkpoint["args"]
    render = {"render_mode": "rgb_array"} if video_dir else {}
    envs = script.make_env(train_args["env_id"], eval_env_count(episodes), seed, train_args["max_episode_steps"], **render)
    agent = script.Agent(
        envs.single_action_space.n, bf16=train_args.get("precision") == "bf16", xla_conv=train_args["xla_conv"]
    )
    params = checkpoint["model_state_dict"]

    base_key, calls = jax.random.PRNGKey(seed), policy_calls()

    @jax.jit
    def policy(obs, call):
        logits, _ = agent.apply(params, obs)
        return logits.argmax(-1) if greedy else jax.random.categorical(jax.random.fold_in(base_key, call), logits)

    return play(envs, lambda obs: np.asarray(policy(obs, next(calls))), episodes, atari=True, video_dir=video_dir)


def evaluate_continuous_action_envpool_xla_jax(
    checkpoint: dict, episodes: int, seed: int, device, greedy: bool, video_dir=None
) -> list[float]:
    """As evaluate_continuous_action_envpool, for the JAX twin: flax parameters, saved observation
    statistics (frozen), greedy plays the Gaussian mean, actions clipped to the bounds."""
    import jax

    script = importlib.import_module("cleanrl.ppo_continuous_action_envpool_xla_jax")
    train_args = checkpoint["args"]
    envs = script.make_env(train_args["env_id"], eval_env_count(episodes), seed, train_args["max_episode_steps"])
    action_space = envs.single_action_space
    agent = script.Agent(int(np.prod(action_space.shape)))
    params = checkpoint["model_state_dict"]
    obs_rms = script.RunningMeanStd(**{name: np.asarray(checkpoint["obs_rms"][name]) for name in ("mean", "var", "count")})

    base_key, calls = jax.random.PRNGKey(seed), policy_calls()

    @jax.jit
    def policy(obs, call):
        action_mean, action_logstd, _ = agent.apply(params, script.normalize_obs(obs, obs_rms, train_args["obs_clip"]))
        if greedy:
            return action_mean
        noise = jax.random.normal(jax.random.fold_in(base_key, call), action_mean.shape)
        return action_mean + jax.numpy.exp(action_logstd) * noise

    def act(obs: np.ndarray) -> np.ndarray:
        action = np.asarray(policy(obs.astype(np.float32), next(calls)), dtype=np.float64)
        return np.clip(action, action_space.low, action_space.high)

    returns = play(envs, act, episodes)
    if video_dir:
        record_gymnasium_episodes(train_args["env_id"], act, video_dir, episodes, seed)
    return returns


def epsilon_greedy(q_network, device: torch.device, num_actions: int, epsilon: float, seed: int, obs_dtype=torch.float32):
    """act(obs) for the DQN scripts: the argmax of the Q-values, a uniformly random action with probability
    `epsilon` (CleanRL plays DQN models with 0.05), coin flips seeded with `seed`."""
    rng = np.random.default_rng(seed)

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            greedy = q_network(torch.as_tensor(obs, device=device).to(obs_dtype)).argmax(dim=1).cpu().numpy()
        explore = rng.random(len(obs)) < epsilon
        return np.where(explore, rng.integers(0, num_actions, len(obs)), greedy)

    return act


def evaluate_dqn(
    checkpoint: dict, episodes: int, seed: int, device: torch.device, greedy: bool, video_dir=None, epsilon: float = 0.05
) -> list[float]:
    """Epsilon-greedy play of cleanrl/dqn.py's Q-network (epsilon 0 with --greedy)."""
    script = importlib.import_module("cleanrl.dqn")
    train_args = checkpoint["args"]
    envs = script.make_env(train_args["env_id"], eval_env_count(episodes), "sync", train_args["max_episode_steps"])
    num_actions = int(envs.single_action_space.n)
    q_network = script.QNetwork(envs.single_observation_space.shape[0], num_actions)
    q_network.load_state_dict(checkpoint["model_state_dict"])
    q_network.to(device).eval()
    act = epsilon_greedy(q_network, device, num_actions, 0.0 if greedy else epsilon, seed)
    returns = play(envs, act, episodes, reset_seed=seed)
    if video_dir:
        record_gymnasium_episodes(train_args["env_id"], act, video_dir, episodes, seed)
    return returns


def evaluate_dqn_atari_envpool(
    checkpoint: dict, episodes: int, seed: int, device: torch.device, greedy: bool, video_dir=None, epsilon: float = 0.05
) -> list[float]:
    """Epsilon-greedy play of cleanrl/dqn_atari_envpool.py's Q-network over whole games (epsilon 0 with --greedy)."""
    script = importlib.import_module("cleanrl.dqn_atari_envpool")
    train_args = checkpoint["args"]
    render_mode = "rgb_array" if video_dir else None
    envs = script.make_env(
        train_args["env_id"], eval_env_count(episodes), seed, train_args["max_episode_steps"], render_mode=render_mode
    )
    num_actions = int(envs.single_action_space.n)
    q_network = script.QNetwork(
        num_actions, bf16=bf16_here(train_args, device), channels_last=train_args["channels_last"] == "on"
    )
    q_network.load_state_dict(checkpoint["model_state_dict"])
    q_network.to(device).eval()
    act = epsilon_greedy(q_network, device, num_actions, 0.0 if greedy else epsilon, seed, obs_dtype=torch.uint8)
    return play(envs, act, episodes, atari=True, video_dir=video_dir)


def evaluate_gaussian_policy_envpool(
    script_name: str, checkpoint: dict, episodes: int, seed: int, device: torch.device, greedy: bool, video_dir=None
) -> list[float]:
    """The on-policy MuJoCo scripts beside PPO (REINFORCE, A2C, NPG, TRPO): their `Agent(obs_dim, action_dim)` has
    `actor_mean` and a state-independent `actor_logstd`; observations are normalised with the saved statistics,
    frozen. Samples from the Gaussian, or plays its mean with --greedy; actions clipped to the bounds."""
    script = importlib.import_module(f"cleanrl.{script_name}")
    train_args = checkpoint["args"]
    envs = script.make_env(train_args["env_id"], eval_env_count(episodes), seed, train_args["max_episode_steps"])
    obs_shape, action_space = envs.single_observation_space.shape, envs.single_action_space
    agent = script.Agent(int(np.prod(obs_shape)), int(np.prod(action_space.shape)))
    agent.load_state_dict(checkpoint["model_state_dict"])
    agent.to(device).eval()
    obs_rms = script.RunningMeanStd(obs_shape)
    obs_rms.load_state_dict(checkpoint["obs_rms"])
    generator = torch.Generator(device=device).manual_seed(seed)

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            obs_t = torch.as_tensor(script.normalize_obs(obs, obs_rms, train_args["obs_clip"]), device=device)
            mean = agent.actor_mean(obs_t)
            if not greedy:
                noise = torch.randn(mean.shape, generator=generator, device=device)
                mean = mean + agent.actor_logstd.exp() * noise
        return np.clip(mean.cpu().numpy(), action_space.low, action_space.high).astype(np.float32)

    returns = play(envs, act, episodes)
    if video_dir:
        record_gymnasium_episodes(train_args["env_id"], act, video_dir, episodes, seed)
    return returns


def evaluate_off_policy_continuous(
    script_name: str, checkpoint: dict, episodes: int, seed: int, device: torch.device, greedy: bool, video_dir=None
) -> list[float]:
    """The deterministic policy of an off-policy continuous-control script (SAC: tanh of the Gaussian mean; TD3 and
    DDPG: the actor's output, without exploration noise), whatever --greedy says. Pendulum and MuJoCo ids alike."""
    script = importlib.import_module(f"cleanrl.{script_name}")
    train_args = checkpoint["args"]
    envs = script.make_env(train_args["env_id"], eval_env_count(episodes), seed, train_args["max_episode_steps"])
    action_space = envs.single_action_space
    actor = script.Actor(envs.single_observation_space.shape[0], action_space.low, action_space.high)
    actor.load_state_dict(checkpoint["model_state_dict"])
    actor.to(device).eval()
    deterministic = (lambda obs: actor.get_action(obs)[2]) if script_name.startswith("sac") else actor
    act = torch_sampler(
        actor, device, True, lambda obs: obs.astype(np.float32), action_space.low, action_space.high, deterministic
    )
    returns = play(envs, act, episodes)
    if video_dir:
        record_gymnasium_episodes(train_args["env_id"], act, video_dir, episodes, seed)
    return returns


EVALUATORS = (
    {
        "ppo_continuous_action_envpool_xla_jax": evaluate_continuous_action_envpool_xla_jax,
        "ppo_atari_envpool_xla_jax": evaluate_atari_envpool_xla_jax,
        "ppo": evaluate_ppo,
        "ppo_continuous_action": evaluate_ppo_continuous_action,
        "ppo_continuous_action_envpool": evaluate_continuous_action_envpool,
        "dqn": evaluate_dqn,
        "dqn_atari_envpool": evaluate_dqn_atari_envpool,
    }
    | {
        name: functools.partial(evaluate_atari_envpool, name)
        for name in ("ppo_atari_envpool", "ppo_atari_envpool_async", "ppo_atari_envpool_distributed")
    }
    | {
        name: functools.partial(evaluate_off_policy_continuous, name)
        for name in ("sac_continuous_action_envpool", "td3_continuous_action_envpool", "ddpg_continuous_action_envpool")
    }
    | {
        f"{name}_continuous_action_envpool": functools.partial(
            evaluate_gaussian_policy_envpool, f"{name}_continuous_action_envpool"
        )
        for name in ("reinforce", "a2c", "npg", "trpo")
    }
)
# The epsilon-greedy evaluators take --epsilon; the others sample from (or take the mode of) their policy.
EPSILON_GREEDY = {"dqn", "dqn_atari_envpool"}


def evaluate(
    model_path: str,
    episodes: int = 10,
    seed: int = 10_000,
    greedy: bool = False,
    cuda: bool = True,
    video_dir: str | None = None,
    epsilon: float = 0.05,
) -> list[float]:
    if episodes <= 0:
        sys.exit(f"error: --episodes must be a positive integer, got {episodes}")
    if not 0 <= epsilon <= 1:
        sys.exit(f"error: --epsilon must be in [0, 1] (a probability), got {epsilon}")
    if not 0 <= seed <= MAX_SEED - MAX_EVAL_ENVS:  # env i of the evaluation gets seed + i, a 32-bit signed integer
        sys.exit(
            f"error: --seed must be in 0..{MAX_SEED - MAX_EVAL_ENVS} (EnvPool seeds are 32-bit signed integers), got {seed}"
        )
    checkpoint = load_checkpoint(model_path)
    script = checkpoint["script"]
    if script not in EVALUATORS:
        sys.exit(f"error: no evaluator for script {script!r}; known: {', '.join(sorted(EVALUATORS))}")
    device = torch.device("cuda" if torch.cuda.is_available() and cuda else "cpu")
    exploration = {"epsilon": epsilon} if script in EPSILON_GREEDY else {}
    try:
        return EVALUATORS[script](checkpoint, episodes, seed, device, greedy, video_dir, **exploration)
    except (RuntimeError, KeyError, AttributeError, ValueError, TypeError) as error:
        # A file whose weights, normaliser or args do not fit the network and env its script builds (written by
        # another script, or edited): load_state_dict's size mismatches, a missing key, an Atari id given to a
        # MuJoCo factory, all raised while setting up. An error once episodes play is not the file's: raised as is.
        if any(
            frame.f_code.co_name in ("play", "record_gymnasium_episodes")
            for frame, _ in traceback.walk_tb(error.__traceback__)
        ):
            raise
        # One line, with the start of what failed (load_state_dict's details are on its later lines).
        first_line = " ".join(str(error).split())[:300]
        env_id = checkpoint["args"].get("env_id")
        sys.exit(
            f"error: --model-path {model_path!r} does not fit the network and env that {script} builds for "
            f"{env_id!r} ({type(error).__name__}: {first_line}); was it written by another script, or edited?"
        )


def kept_checkpoints(run_dir: str) -> list[tuple[int, str]]:
    """(global step, path) of every checkpoint a run kept with --keep-checkpoints, in training order."""
    kept = []
    for name in os.listdir(run_dir):
        step_ext = kept_checkpoint_step(name)
        if step_ext and step_ext[1] == ".pt":
            kept.append((step_ext[0], os.path.join(run_dir, name)))
    return sorted(kept)


def evaluate_kept_checkpoints(run_dir: str, args: EvalArgs) -> tuple[int, float]:
    """Each kept checkpoint of `run_dir` played for `args.episodes` episodes, one line each; returns the step
    and mean return of the best."""
    kept = kept_checkpoints(run_dir)
    if not kept:
        sys.exit(
            f"error: --model-path {run_dir!r} is a folder without kept checkpoints (checkpoint-<step>.pt, written by a run with --keep-checkpoints)"
        )
    best_step, best_mean = 0, -np.inf
    for step, path in kept:
        returns = evaluate(path, args.episodes, args.seed, args.greedy, args.cuda, epsilon=args.epsilon)
        print(
            f"step {step:>11,}: mean return over {len(returns)} episodes {np.mean(returns):10.2f} +- {np.std(returns):.2f}",
            flush=True,
        )
        if np.mean(returns) > best_mean:
            best_step, best_mean = step, float(np.mean(returns))
    print(f"best: step {best_step:,}, mean return {best_mean:.2f} (of {len(kept)} kept checkpoints)")
    return best_step, best_mean


def main() -> None:
    args = tyro.cli(EvalArgs)
    hide_box_precision_warnings()  # as the training scripts do
    if args.torch_threads < 0:
        sys.exit(f"error: --torch-threads must be >= 0 (0 = auto), got {args.torch_threads}")
    torch.set_num_threads(torch_threads(args.torch_threads))
    if os.path.isdir(args.model_path):
        if args.capture_video:
            sys.exit(f"error: --capture-video films one model: give a file, not the folder {args.model_path!r}")
        evaluate_kept_checkpoints(args.model_path, args)
        return
    video_dir = None
    if args.capture_video:
        video_dir = args.video_dir or os.path.join(os.path.dirname(os.path.abspath(args.model_path)), "videos")
        check_writable_dir(video_dir, "--video-dir")
    returns = evaluate(args.model_path, args.episodes, args.seed, args.greedy, args.cuda, video_dir, epsilon=args.epsilon)
    for i, episodic_return in enumerate(returns):
        print(f"episode {i}: return {episodic_return:.2f}")
    if video_dir:
        print(f"videos: {video_dir}")
    print(f"mean return over {len(returns)} episodes: {np.mean(returns):.2f} +- {np.std(returns):.2f}")


if __name__ == "__main__":
    main()
