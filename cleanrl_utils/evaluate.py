"""Play a saved model and report per-episode returns.

    python -m cleanrl_utils.evaluate --model-path runs/<run>/ppo_atari_envpool.cleanrl_model --episodes 10

A `.cleanrl_model` file holds the script name, its args and the weights (plus, for scripts that
normalise observations, the normaliser state), so nothing else needs to be passed. The network and
env factory are imported from the script itself: evaluation plays exactly what training played.
"""

import importlib
import os
import sys
from dataclasses import dataclass

import numpy as np
import torch
import tyro


@dataclass
class EvalArgs:
    model_path: str
    """path of a `.cleanrl_model` file written by a script's `--save-model`"""
    episodes: int = 10
    """number of episodes (Atari: whole games) to play"""
    seed: int = 10_000
    """seed of the evaluation envs (differs from training seeds by default)"""
    greedy: bool = False
    """take the most likely action instead of sampling from the policy"""
    cuda: bool = True
    """use cuda when available"""


def load_flax_checkpoint(model_path: str) -> dict | None:
    """The JAX scripts save flax msgpack (same keys, flax params as "model_state_dict"); None if not one."""
    from flax.serialization import msgpack_restore

    try:
        with open(model_path, "rb") as f:
            checkpoint = msgpack_restore(f.read())
    except Exception:
        return None
    return checkpoint if isinstance(checkpoint, dict) and "script" in checkpoint else None


def load_checkpoint(model_path: str) -> dict:
    if not os.path.isfile(model_path):
        sys.exit(f"error: --model-path {model_path!r} does not exist")
    flax_checkpoint = load_flax_checkpoint(model_path)
    if flax_checkpoint is not None:
        return flax_checkpoint
    try:
        checkpoint = torch.load(model_path, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated or foreign file: say so in one line
        sys.exit(f"error: --model-path {model_path!r} is not a readable .cleanrl_model file ({type(error).__name__})")
    if not isinstance(checkpoint, dict) or "script" not in checkpoint or "model_state_dict" not in checkpoint:
        sys.exit(f"error: --model-path {model_path!r} is not a .cleanrl_model file (no script name or weights)")
    return checkpoint


def evaluate_atari_envpool(checkpoint: dict, episodes: int, seed: int, device: torch.device, greedy: bool) -> list[float]:
    """Whole games (all lives) from the unclipped reward, one game per env so that short games
    are not over-represented."""
    script = importlib.import_module("cleanrl.ppo_atari_envpool")
    train_args = checkpoint["args"]
    envs = script.make_env(train_args["env_id"], episodes, seed, train_args["max_episode_steps"])
    agent = script.Agent(envs.single_action_space.n, bf16=train_args["bf16"], channels_last=train_args["channels_last"])
    agent.load_state_dict(checkpoint["model_state_dict"])
    agent.to(device).eval()

    obs, _ = envs.reset()
    returns = np.zeros(episodes)
    finished = np.zeros(episodes, dtype=bool)
    while not finished.all():
        with torch.no_grad():
            obs_t = torch.from_numpy(obs).to(device)
            if greedy:
                action = agent.actor(agent.hidden(obs_t)).argmax(dim=-1)
            else:
                action, _, _, _ = agent.get_action_and_value(obs_t)
        obs, _, _, truncated, info = envs.step(action.cpu().numpy())
        returns += info["reward"] * ~finished
        finished |= info["terminated"].astype(bool) | truncated
    envs.close()
    return returns.tolist()


def evaluate_continuous_action_envpool(
    checkpoint: dict, episodes: int, seed: int, device: torch.device, greedy: bool
) -> list[float]:
    """One episode per env, in raw reward units. Observations are normalised with the saved
    statistics, frozen (never updated here); greedy plays the Gaussian mean. Actions are clipped
    to the bounds as in training."""
    script = importlib.import_module("cleanrl.ppo_continuous_action_envpool")
    train_args = checkpoint["args"]
    envs = script.make_env(train_args["env_id"], episodes, seed, train_args["max_episode_steps"])
    obs_shape, action_space = envs.single_observation_space.shape, envs.single_action_space
    agent = script.Agent(int(np.prod(obs_shape)), int(np.prod(action_space.shape)))
    agent.load_state_dict(checkpoint["model_state_dict"])
    agent.to(device).eval()
    obs_rms = script.RunningMeanStd(obs_shape)
    obs_rms.load_state_dict(checkpoint["obs_rms"])

    obs, _ = envs.reset()
    returns = np.zeros(episodes)
    finished = np.zeros(episodes, dtype=bool)
    while not finished.all():
        with torch.no_grad():
            obs_t = torch.from_numpy(script.normalize_obs(obs, obs_rms, train_args["obs_clip"])).to(device)
            if greedy:
                action = agent.actor_mean(obs_t)
            else:
                action, _, _, _ = agent.get_action_and_value(obs_t)
        env_action = np.clip(action.cpu().numpy(), action_space.low, action_space.high)
        obs, reward, terminated, truncated, _ = envs.step(env_action.astype(np.float32))
        returns += reward * ~finished
        finished |= terminated | truncated
    envs.close()
    return returns.tolist()


def evaluate_ppo(checkpoint: dict, episodes: int, seed: int, device: torch.device, greedy: bool) -> list[float]:
    """One episode per env of a same-step Gymnasium vector env; each return is read from
    RecordEpisodeStatistics at the env's first boundary."""
    script = importlib.import_module("cleanrl.ppo")
    train_args = checkpoint["args"]
    envs = script.make_env(train_args["env_id"], episodes, "sync", train_args["max_episode_steps"])
    agent = script.Agent(envs.single_observation_space.shape[0], envs.single_action_space.n)
    agent.load_state_dict(checkpoint["model_state_dict"])
    agent.to(device).eval()

    obs, _ = envs.reset(seed=seed)
    returns = np.zeros(episodes)
    finished = np.zeros(episodes, dtype=bool)
    while not finished.all():
        with torch.no_grad():
            obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)
            if greedy:
                action = agent.actor(obs_t).argmax(dim=-1)
            else:
                action, _, _, _ = agent.get_action_and_value(obs_t)
        obs, _, terminated, truncated, info = envs.step(action.cpu().numpy())
        first_end = (terminated | truncated) & ~finished
        if first_end.any():
            returns[first_end] = info["episode"]["r"][first_end]
            finished |= first_end
    envs.close()
    return returns.tolist()


def evaluate_ppo_continuous_action(
    checkpoint: dict, episodes: int, seed: int, device: torch.device, greedy: bool
) -> list[float]:
    """One episode per env of a same-step Gymnasium vector env, in raw reward units (from
    RecordEpisodeStatistics). Observations are normalised with the saved statistics, frozen;
    greedy plays the Gaussian mean. Actions are clipped to the bounds as in training."""
    script = importlib.import_module("cleanrl.ppo_continuous_action")
    train_args = checkpoint["args"]
    envs = script.make_env(train_args["env_id"], episodes, "sync", train_args["max_episode_steps"])
    obs_shape, action_space = envs.single_observation_space.shape, envs.single_action_space
    agent = script.Agent(obs_shape[0], action_space.shape[0])
    agent.load_state_dict(checkpoint["model_state_dict"])
    agent.to(device).eval()
    obs_rms = script.RunningMeanStd(obs_shape)
    obs_rms.load_state_dict(checkpoint["obs_rms"])

    obs, _ = envs.reset(seed=seed)
    returns = np.zeros(episodes)
    finished = np.zeros(episodes, dtype=bool)
    while not finished.all():
        with torch.no_grad():
            obs_t = torch.from_numpy(script.normalize_obs(obs, obs_rms, train_args["obs_clip"])).to(device)
            if greedy:
                action = agent.actor_mean(obs_t)
            else:
                action, _, _, _ = agent.get_action_and_value(obs_t)
        env_action = np.clip(action.cpu().numpy(), action_space.low, action_space.high)
        obs, _, terminated, truncated, info = envs.step(env_action)
        first_end = (terminated | truncated) & ~finished
        if first_end.any():
            returns[first_end] = info["episode"]["r"][first_end]
            finished |= first_end
    envs.close()
    return returns.tolist()


def evaluate_atari_envpool_xla_jax(checkpoint: dict, episodes: int, seed: int, device, greedy: bool) -> list[float]:
    """As evaluate_atari_envpool, for the JAX twin's flax parameters (runs on JAX's device)."""
    import jax

    script = importlib.import_module("cleanrl.ppo_atari_envpool_xla_jax")
    train_args = checkpoint["args"]
    envs = script.make_env(train_args["env_id"], episodes, seed, train_args["max_episode_steps"])
    agent = script.Agent(envs.single_action_space.n, bf16=train_args["bf16"], xla_conv=train_args["xla_conv"])
    params = checkpoint["model_state_dict"]

    @jax.jit
    def policy(obs, key):
        logits, _ = agent.apply(params, obs)
        return logits.argmax(-1) if greedy else jax.random.categorical(key, logits)

    key = jax.random.PRNGKey(seed)
    obs, _ = envs.reset()
    returns = np.zeros(episodes)
    finished = np.zeros(episodes, dtype=bool)
    while not finished.all():
        key, action_key = jax.random.split(key)
        obs, _, _, truncated, info = envs.step(np.asarray(policy(obs, action_key)))
        returns += info["reward"] * ~finished
        finished |= info["terminated"].astype(bool) | truncated
    envs.close()
    return returns.tolist()


def evaluate_continuous_action_envpool_xla_jax(
    checkpoint: dict, episodes: int, seed: int, device, greedy: bool
) -> list[float]:
    """As evaluate_continuous_action_envpool, for the JAX twin: flax parameters, saved observation
    statistics (frozen), greedy plays the Gaussian mean, actions clipped to the bounds."""
    import jax

    script = importlib.import_module("cleanrl.ppo_continuous_action_envpool_xla_jax")
    train_args = checkpoint["args"]
    envs = script.make_env(train_args["env_id"], episodes, seed, train_args["max_episode_steps"])
    action_space = envs.single_action_space
    agent = script.Agent(int(np.prod(action_space.shape)))
    params = checkpoint["model_state_dict"]
    obs_rms = script.RunningMeanStd(**{name: np.asarray(checkpoint["obs_rms"][name]) for name in ("mean", "var", "count")})

    @jax.jit
    def policy(obs, key):
        action_mean, action_logstd, _ = agent.apply(params, script.normalize_obs(obs, obs_rms, train_args["obs_clip"]))
        if greedy:
            return action_mean
        return action_mean + jax.numpy.exp(action_logstd) * jax.random.normal(key, action_mean.shape)

    key = jax.random.PRNGKey(seed)
    obs, _ = envs.reset()
    returns = np.zeros(episodes)
    finished = np.zeros(episodes, dtype=bool)
    while not finished.all():
        key, action_key = jax.random.split(key)
        action = np.asarray(policy(obs.astype(np.float32), action_key), dtype=np.float64)
        obs, reward, terminated, truncated, _ = envs.step(np.clip(action, action_space.low, action_space.high))
        returns += reward * ~finished
        finished |= terminated | truncated
    envs.close()
    return returns.tolist()


EVALUATORS = {
    "ppo_continuous_action_envpool_xla_jax": evaluate_continuous_action_envpool_xla_jax,
    "ppo_atari_envpool_xla_jax": evaluate_atari_envpool_xla_jax,
    "ppo_atari_envpool": evaluate_atari_envpool,
    "ppo": evaluate_ppo,
    "ppo_continuous_action": evaluate_ppo_continuous_action,
    "ppo_continuous_action_envpool": evaluate_continuous_action_envpool,
}


def evaluate(model_path: str, episodes: int = 10, seed: int = 10_000, greedy: bool = False, cuda: bool = True) -> list[float]:
    if episodes <= 0:
        sys.exit(f"error: --episodes must be a positive integer, got {episodes}")
    checkpoint = load_checkpoint(model_path)
    script = checkpoint["script"]
    if script not in EVALUATORS:
        sys.exit(f"error: no evaluator for script {script!r}; known: {', '.join(sorted(EVALUATORS))}")
    device = torch.device("cuda" if torch.cuda.is_available() and cuda else "cpu")
    return EVALUATORS[script](checkpoint, episodes, seed, device, greedy)


def main() -> None:
    args = tyro.cli(EvalArgs)
    returns = evaluate(args.model_path, args.episodes, args.seed, args.greedy, args.cuda)
    for i, episodic_return in enumerate(returns):
        print(f"episode {i}: return {episodic_return:.2f}")
    print(f"mean return over {len(returns)} episodes: {np.mean(returns):.2f} +- {np.std(returns):.2f}")


if __name__ == "__main__":
    main()
