"""Evaluation videos: stream RGB frames into an H.264 MP4 (imageio-ffmpeg ships its own ffmpeg)."""

import os

import numpy as np


class VideoWriter:
    """One episode, one file. Frames are (H, W, 3) uint8 with even H and W (yuv420p needs them)."""

    def __init__(self, path: str, fps: int):
        import imageio.v2 as imageio

        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.path = path
        self.frames = 0
        self._writer = imageio.get_writer(
            path, fps=fps, codec="libx264", quality=7, macro_block_size=2, ffmpeg_log_level="error"
        )

    def append(self, frame: np.ndarray) -> None:
        self._writer.append_data(np.ascontiguousarray(frame))
        self.frames += 1

    def close(self) -> None:
        self._writer.close()


def record_gymnasium_episodes(
    env_id: str, act, video_dir: str, episodes: int, seed: int, fps: int = 30, prefix: str = "eval"
) -> list[str]:
    """Play `episodes` episodes of a Gymnasium env with `act(obs[None]) -> action[None]` and write
    one MP4 each. MuJoCo renders headless through EGL unless MUJOCO_GL says otherwise."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    import gymnasium as gym

    env = gym.make(env_id, render_mode="rgb_array")
    paths = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        writer = VideoWriter(os.path.join(video_dir, f"{prefix}-episode-{episode}.mp4"), fps)
        writer.append(env.render())
        done = False
        while not done:
            action = act(np.asarray(obs)[None])[0]
            obs, _, terminated, truncated, _ = env.step(action)
            writer.append(env.render())
            done = terminated or truncated
        writer.close()
        paths.append(writer.path)
    env.close()
    return paths
