"""The state of a Gymnasium SyncVectorEnv, for a checkpoint: saved with the weights, put back on resume,
so the resumed run continues the very episodes the checkpoint interrupted.

Written for the vector env the Gymnasium PPO script's make_env builds: a SyncVectorEnv (same-step autoreset) under
Gymnasium's vector RecordEpisodeStatistics. The sub-envs are pickled, because their state is
arbitrary Python objects (CartPole's `state` array and `steps_beyond_terminated`, a numpy Generator,
wrapper counters) and a pickle gets all of it for any classic-control env. The pickle is stored as a
uint8 tensor, so the checkpoint still loads with `torch.load(weights_only=True)`, and it is read
back by EnvStateUnpickler, which names nothing but Gymnasium classes and numpy's reconstructors: a
tampered checkpoint cannot call anything else.
"""

import io
import pickle

import gymnasium as gym


class EnvStateUnpickler(pickle.Unpickler):
    """Unpickles the sub-envs of a checkpoint, naming nothing but Gymnasium classes and numpy's
    array, scalar and random-generator reconstructors: a tampered file cannot call anything else."""

    NUMPY = {("numpy", "dtype"), ("numpy", "ndarray"), ("numpy._core.multiarray", "_reconstruct")}
    NUMPY |= {("numpy._core.multiarray", "scalar")}

    def find_class(self, module: str, name: str):
        if (module, name) in self.NUMPY or module.startswith("numpy.random."):
            return super().find_class(module, name)
        if module.startswith("gymnasium."):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in an env state")


def vector_env_state(envs: gym.vector.VectorEnv) -> dict | None:
    """Everything the episodes in flight depend on, for a SyncVectorEnv under RecordEpisodeStatistics:
    each sub-env whole (simulator state, `np_random`, TimeLimit's elapsed steps, the order-enforcing
    and checker flags), the episode-statistics accumulators and the autoreset bookkeeping. None where
    that cannot be had: AsyncVectorEnv (the envs live in subprocesses), or envs that pickle by
    constructor arguments (EzPickle: Box2D, MuJoCo), which would come back as fresh, un-reset envs."""
    import torch

    sync_env = envs.unwrapped
    if not isinstance(sync_env, gym.vector.SyncVectorEnv):
        return None
    if any(isinstance(env.unwrapped, gym.utils.EzPickle) for env in sync_env.envs):
        return None
    try:
        sub_envs = pickle.dumps(sync_env.envs)
    except Exception:  # an env holding something unpicklable: resume with fresh episodes
        return None
    return {
        "sub_envs": torch.frombuffer(bytearray(sub_envs), dtype=torch.uint8),
        "autoreset_envs": torch.from_numpy(sync_env._autoreset_envs.copy()),
        "episode_returns": torch.from_numpy(envs.episode_returns.copy()),
        "episode_lengths": torch.from_numpy(envs.episode_lengths.copy()),
        "prev_dones": torch.from_numpy(envs.prev_dones.copy()),
        "episode_count": int(envs.episode_count),
    }


def set_vector_env_state(envs: gym.vector.VectorEnv, state: dict) -> None:
    """Put a vector env (sync, under RecordEpisodeStatistics) back into the state vector_env_state
    saved. Raises (pickle.UnpicklingError, ValueError, ...) if the state does not fit."""
    sync_env = envs.unwrapped
    if not isinstance(sync_env, gym.vector.SyncVectorEnv):
        raise ValueError("the env state of a SyncVectorEnv cannot be restored into another vector env")
    sub_envs = EnvStateUnpickler(io.BytesIO(state["sub_envs"].numpy().tobytes())).load()
    if len(sub_envs) != sync_env.num_envs:
        raise ValueError(f"the saved env state has {len(sub_envs)} envs, not {sync_env.num_envs}")
    for env in sync_env.envs:
        env.close()
    sync_env.envs = sub_envs
    sync_env._autoreset_envs = state["autoreset_envs"].numpy().copy()
    envs.episode_returns = state["episode_returns"].numpy().copy()
    envs.episode_lengths = state["episode_lengths"].numpy().copy()
    envs.prev_dones = state["prev_dones"].numpy().copy()
    envs.episode_count = state["episode_count"]


class SavedVectorEnv:
    """A vector env's state as a checkpoint entry, with the `state_dict()`/`load_state_dict()` pair a
    network has: `state_dict()` is vector_env_state (None where the envs cannot be saved), and
    `load_state_dict(None)` leaves the envs as they are (a resumed run then starts fresh episodes)."""

    def __init__(self, envs: gym.vector.VectorEnv):
        self.envs = envs

    def state_dict(self) -> dict | None:
        return vector_env_state(self.envs)

    def load_state_dict(self, state: dict | None) -> None:
        if state is not None:
            set_vector_env_state(self.envs, state)
