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


def load_checkpoint(model_path: str) -> dict:
    if not os.path.isfile(model_path):
        sys.exit(f"error: --model-path {model_path!r} does not exist")
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


EVALUATORS = {
    "ppo_atari_envpool": evaluate_atari_envpool,
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
