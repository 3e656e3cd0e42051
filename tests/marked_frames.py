"""A learning task for the Atari scripts that a test can afford: real EnvPool Atari frames, with a marker painted on
each frame and a reward that depends on the action taken against that marker.

An Atari game learns in millions of steps, far beyond a test on 2 cores. Here the game runs as usual (its frames,
stacking, resets, time limit, `elapsed_step`), but each new frame gets a band of rows painted all white or all black
at random, and the game's reward is replaced: +1 when the action sent after a frame is RIGHT (2) on a white band or
LEFT (3) on a black band, else 0. A random policy of Pong's 6 actions earns 1/6 a step, a policy that ignores the
band at most 1/2, and one that reads the newest frame's band 1. Only a script whose observation, action and reward
stay paired (the right env, the right step, the newest frame in the last channel) can get past 1/2.

The band is painted into the stack as EnvPool stacks frames: channel -1 is the newest frame's band, channel -2 the
one before, and a reset stack repeats its first frame (so DQN's frame-deduplicating replay rebuilds the same stacks).
The step after a reset, whose action EnvPool ignores, earns 0. `info["reward"]` (the scripts' episodic return) gets
the same reward.

    python -c "$(python -c 'import marked_frames; print(marked_frames.BOOTSTRAP)')" SCRIPT ARGS...
runs SCRIPT as __main__ with envpool.make patched (tests pass BOOTSTRAP with `-c`). A script that steps through
EnvPool's XLA interface inside `jax.jit` gets a step that calls back into the wrapper (`MarkedFrames.xla`).

A memory task for the recurrent scripts: with MARKED_FRAMES_LAG=L in the environment, the reward follows the band
of the frame L steps before the one the action was chosen on (0 while that frame is from before the game began).
With one frame per observation, a policy without memory earns at most 1/2 a step, one that remembers L bands 1.
"""

import os

import numpy as np

BAND_ROWS = 16  # the top 16 of 84 rows: Pong's score area
WHITE_ACTION, BLACK_ACTION = 2, 3  # Pong's RIGHT and LEFT

BOOTSTRAP = """
import os, runpy, sys
sys.path.insert(0, {tests!r})
import marked_frames
marked_frames.patch_envpool()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


class MarkedFrames:
    """Wraps an EnvPool Atari pool (sync `step`, or async `send`/`recv`); everything else is the pool's own."""

    def __init__(self, envs, seed: int, lag: int = 0):
        self.envs = envs
        num_envs, stack = envs.config["num_envs"], envs.config["stack_num"]
        self.rng = np.random.default_rng(seed)
        self.bands = np.zeros((num_envs, stack), dtype=bool)  # per env, oldest to newest frame
        self.sent = np.zeros(num_envs, dtype=np.int64)  # the last action sent to each env
        # per env, the bands of the last lag + 1 frames of this game, oldest first: 1 white, 0 black, -1 none yet
        self.lagged = np.full((num_envs, lag + 1), -1, dtype=np.int8)

    def __getattr__(self, name: str):
        return getattr(self.envs, name)

    def _mark(self, obs: np.ndarray, rewards: np.ndarray, info: dict) -> tuple[np.ndarray, np.ndarray]:
        env_id = np.asarray(info["env_id"])
        new_game = np.asarray(info["elapsed_step"]) == 0
        shown = self.lagged[env_id, 0]  # the band of the frame each action was chosen on, or lag frames before it
        earned = np.where(shown == 1, self.sent[env_id] == WHITE_ACTION, self.sent[env_id] == BLACK_ACTION)
        rewards = np.where(new_game | (shown < 0), 0.0, earned.astype(np.float32)).astype(np.float32)
        band = self.rng.random(len(env_id)) < 0.5
        history = np.concatenate([self.bands[env_id, 1:], band[:, None]], axis=1)
        self.bands[env_id] = np.where(new_game[:, None], band[:, None], history)
        lagged = np.concatenate([self.lagged[env_id, 1:], band[:, None].astype(np.int8)], axis=1)
        lagged[new_game, :-1] = -1
        self.lagged[env_id] = lagged
        obs = np.array(obs)
        obs[:, :, :BAND_ROWS, :] = np.where(self.bands[env_id], 255, 0).astype(obs.dtype)[:, :, None, None]
        info["reward"] = rewards.copy()
        return obs, rewards

    def reset(self, env_id=None):
        obs, info = self.envs.reset() if env_id is None else self.envs.reset(env_id)
        obs, _ = self._mark(obs, np.zeros(len(obs), np.float32), info)
        return obs, info

    def step(self, actions, env_id=None):
        if env_id is None:
            self.sent[:] = actions
            obs, rewards, term, trunc, info = self.envs.step(actions)
        else:
            self.sent[env_id] = actions
            obs, rewards, term, trunc, info = self.envs.step(actions, env_id)
        obs, rewards = self._mark(obs, rewards, info)
        return obs, rewards, term, trunc, info

    def xla(self):
        """EnvPool's XLA interface (handle, recv, send, step) with `step` marked: inside `jax.jit` it calls back into
        this wrapper's Python `step` (an ordered `io_callback`) and returns what EnvPool's own XLA step would, with the
        shapes and dtypes that step declares. The handle passes through unused."""
        import jax
        import jax.numpy as jnp
        from jax.experimental import io_callback

        handle, recv, send, step = self.envs.xla()
        declared = jax.eval_shape(step, handle, jnp.zeros(self.envs.config["num_envs"], jnp.int32))

        def host_step(handle, actions):
            returned = (handle, self.step(np.asarray(actions)))
            return jax.tree.map(lambda spec, value: np.asarray(value, spec.dtype).reshape(spec.shape), declared, returned)

        def marked_step(handle, actions):
            return io_callback(host_step, declared, handle, actions, ordered=True)

        return handle, recv, send, marked_step

    def send(self, actions, env_id):
        self.sent[env_id] = actions
        return self.envs.send(actions, env_id)

    def recv(self):
        obs, rewards, term, trunc, info = self.envs.recv()
        obs, rewards = self._mark(obs, rewards, info)
        return obs, rewards, term, trunc, info


def patch_envpool() -> None:
    """Every `envpool.make` of this process returns its pool wrapped in MarkedFrames (seeded by the pool's seed)."""
    import envpool

    make = envpool.make

    def marked_make(*args, **kwargs):
        lag = int(os.environ.get("MARKED_FRAMES_LAG", "0"))
        return MarkedFrames(make(*args, **kwargs), seed=int(kwargs.get("seed", 0)) + 12345, lag=lag)

    envpool.make = marked_make
