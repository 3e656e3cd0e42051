"""Evaluation videos: stream RGB frames into an H.264 MP4 (imageio-ffmpeg ships its own ffmpeg), and
the evaluation-video jobs a training run starts."""

import contextlib
import errno
import os
import signal
import subprocess
import sys
import threading
import warnings

import numpy as np

from cleanrl_utils.stop import STILL_FILMING, current_place, run_folder_gone


class VideoWriter:
    """One episode, one file. Frames are (H, W, 3) uint8 with even H and W (yuv420p needs them). The file is written
    as `<name>.partial.mp4` and takes its own name only when closed: a video under its own name is a whole episode,
    and an episode cut short by a stop (Ctrl-C, SIGTERM, kill) is left as `.partial.mp4` and says so."""

    def __init__(self, path: str, fps: int):
        import imageio.v2 as imageio

        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.path = path
        self.partial_path = f"{path.removesuffix('.mp4')}.partial.mp4"
        self.frames = 0
        # The folder, held open: a run folder moved while its video is filmed (ffmpeg writes on into the open file)
        # still gets its video named whole where the folder is now (trial 21, Y6: FileNotFoundError, and a whole
        # episode left as .partial.mp4)
        self._folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
        # ffmpeg's "fatal" level: a stop can cut a frame in two in ffmpeg's pipe, and at "error" ffmpeg then prints
        # "Invalid buffer size, packet size ... < expected frame_size" under the stop's one line; the cut file is
        # named .partial already. A failed encode still raises in imageio (broken pipe, exit code).
        self._writer = imageio.get_writer(
            self.partial_path, fps=fps, codec="libx264", quality=7, macro_block_size=2, ffmpeg_log_level="fatal"
        )

    def append(self, frame: np.ndarray) -> None:
        with self._ffmpeg_failures_said():
            self._writer.append_data(np.ascontiguousarray(frame))
        self.frames += 1

    def close(self) -> None:
        try:
            with self._ffmpeg_failures_said():
                self._writer.close()
                # ffmpeg may end without an error when the disk fills at its last write, the index (trial 21, Y2: a
                # 4,096-byte eval-episode-1.mp4 without it, named whole): a file is named whole only once checked whole
                if not mp4_is_whole(self._now(self.partial_path)):
                    raise RuntimeError(f"ffmpeg left {self.partial_path} without its index (moov box)")
            partial, whole = os.path.basename(self.partial_path), os.path.basename(self.path)
            os.replace(partial, whole, src_dir_fd=self._folder, dst_dir_fd=self._folder)
            self.path = self._now(self.path)
        finally:
            os.close(self._folder)

    def _now(self, path: str) -> str:
        """`path`'s file in its folder where the folder is now (moved or not)."""
        return os.path.join(os.readlink(f"/proc/self/fd/{self._folder}"), os.path.basename(path))

    @contextlib.contextmanager
    def _ffmpeg_failures_said(self):
        """ffmpeg encodes in a child process fed through a pipe. A tool ends silently when its stdout's reader goes
        (SIGPIPE at its default action), so a write to ffmpeg's pipe after ffmpeg died killed evaluate with no word
        (trial 19, W3: a full disk, exit 141). Here a dead ffmpeg raises, and a full disk is named as such: ffmpeg's
        own line about it is below the log level set above."""
        quiet_exit = threading.current_thread() is threading.main_thread()
        quiet_exit = quiet_exit and signal.getsignal(signal.SIGPIPE) == signal.SIG_DFL
        if quiet_exit:
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        try:
            yield
        except Exception as error:
            if self._disk_is_full():  # the cut file is no video (its index is written last): not left behind (trial 20)
                with contextlib.suppress(OSError):
                    os.remove(self.partial_path)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.partial_path) from error
            raise
        finally:
            if quiet_exit:
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)

    def _disk_is_full(self) -> bool:
        """Whether 64 KiB more of the video file can be written where ffmpeg wrote it (the file is cut short anyway)."""
        try:
            size = os.path.getsize(self.partial_path) if os.path.exists(self.partial_path) else 0
            with open(self.partial_path, "ab", buffering=0) as file:
                try:
                    written, probe = 0, bytes(2**16)
                    while written < len(probe):  # a short write is a nearly full disk; the next one raises
                        written += file.write(probe[written:])
                    os.fsync(file.fileno())
                except OSError as error:
                    return error.errno in (errno.ENOSPC, errno.EDQUOT)
                finally:
                    with contextlib.suppress(OSError):  # not every file can be cut back (a device)
                        file.truncate(size)
        except OSError:
            pass
        return False


def mp4_is_whole(path: str) -> bool:
    """Whether the MP4 file's top-level boxes run exactly to its end and include the index (`moov`) and the frames
    (`mdat`): a file cut short, at any byte, is not. Each box starts with its 32-bit size and 4-letter type; size 1
    means a 64-bit size follows, size 0 "to the end of the file"."""
    try:
        end, offset, types = os.path.getsize(path), 0, set()
        with open(path, "rb") as file:
            while offset < end:
                file.seek(offset)
                header = file.read(16)
                if len(header) < 8:
                    return False
                size, kind = int.from_bytes(header[:4], "big"), header[4:8]
                if size == 1:
                    size = int.from_bytes(header[8:16], "big") if len(header) == 16 else 0
                elif size == 0:
                    size = end - offset
                if size < 8:
                    return False
                types.add(kind)
                offset += size
    except OSError:
        return False
    return offset == end and {b"moov", b"mdat"} <= types


def check_gymnasium_films(env_id: str) -> None:
    """One line and exit 1 unless Gymnasium can make `env_id`, the env that films an EnvPool MuJoCo policy (EnvPool's
    MuJoCo envs do not render). EnvPool takes MuJoCo v3 ids that Gymnasium 1.x moved out to gymnasium-robotics
    (trial 17, U6: every training video failed with exit 0, and evaluate ended in an ImportError traceback)."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    import gymnasium as gym

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gym.make(env_id, render_mode="rgb_array").close()
    except Exception as error:  # ImportError for the moved ids; any failure to build means no video
        said = str(error).split("\n")[0][:160]
        sys.exit(
            f"error: --capture-video films {env_id} in Gymnasium's env of that id, which Gymnasium cannot make here "
            f"({type(error).__name__}: {said}): train on a v4 or v5 id to film, or leave out --capture-video"
        )


def record_gymnasium_episodes(
    env_id: str,
    act,
    video_dir: str,
    episodes: int,
    seed: int,
    fps: int = 30,
    prefix: str = "eval",
    max_episode_steps: int | None = None,
) -> list[str]:
    """Play `episodes` episodes of a Gymnasium env with `act(obs[None]) -> action[None]` and write
    one MP4 each. MuJoCo renders headless through EGL unless MUJOCO_GL says otherwise. `max_episode_steps`: the
    run's own time limit (its --max-episode-steps), None for the env's: a filmed episode ends where the run's
    episodes and its evaluation's end (a 20-step run was filmed for 77 steps)."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    # rgb_array frames need no display: without this, pygame's SDL (classic control) looks for one and prints
    # "error: XDG_RUNTIME_DIR is invalid" on a machine without a desktop session.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    import gymnasium as gym

    # A v4 MuJoCo id is the trained one (EnvPool's MuJoCo envs are v4): Gymnasium's advice to move to v5 is noise here
    # (set after Gymnasium's import, whose own warning filters would otherwise come first).
    warnings.filterwarnings("ignore", message=".*is out of date. You should consider upgrading")
    limit = {"max_episode_steps": max_episode_steps} if max_episode_steps else {}
    env = gym.make(env_id, render_mode="rgb_array", **limit)
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


class VideoJobs:
    """Evaluation videos filmed during training, each by `cleanrl_utils.evaluate` in its own process
    from a snapshot of the policy (`write_model(path)` writes it), so the training envs never render.

    At most one evaluator runs at a time: a video that falls due while one is still being filmed is
    skipped, and the first skip is printed (the rest are counted, and the count printed when that video
    ends: a frequent `--video-every` would otherwise print a line per iteration); the last one (`final=True`: end of training or a requested
    stop) waits for the running one instead. Evaluators run in their own session, so a terminal's
    Ctrl-C, which reaches the whole foreground process group, does not kill them: the training
    process waits for them in `finish()`, and if it is aborted they still finish their video."""

    def __init__(self, run_dir: str, write_model, env: dict | None = None):
        self.run_dir = run_dir
        self.write_model = write_model
        self.env = env  # the evaluator's environment variables (None: this process's)
        self.running: tuple[subprocess.Popen, str, object] | None = None
        self.results: list[str] = []
        self.skipped: list[int] = []  # iterations skipped while the running video is filmed

    def film(self, iteration: int, final: bool = False) -> None:
        if self._running_still():
            if not final:
                if not self.skipped:
                    print(
                        f"evaluation video of iteration {iteration} skipped: the previous one is still being filmed",
                        flush=True,
                    )
                self.skipped.append(iteration)
                return
            self._wait()
        # A run folder moved or deleted meanwhile is not made again here (trial 22, Z3: the run went on unaware,
        # split over the moved folder and a new one under the old name)
        gone = run_folder_gone()
        if gone is not None:
            sys.exit(gone)
        video_dir = os.path.join(self.run_dir, "videos", f"iteration-{iteration}")
        os.makedirs(video_dir, exist_ok=True)
        try:
            model_path = self.write_model(os.path.join(video_dir, "model.cleanrl_model"))
        except BaseException:  # its one line is said; the folder made for it goes (trial 24, K7: left empty)
            for folder in (video_dir, os.path.dirname(video_dir)):
                try:  # rmdir refuses a folder holding anything: earlier videos stay
                    os.rmdir(folder)
                except OSError:
                    break
            raise
        # Paths inside the evaluator's working folder, the video folder itself: a run folder moved while the evaluator
        # starts (seconds of imports) still has its video filmed, there (trial 22, Z1: "--model-path ... does not exist")
        command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", os.path.basename(model_path)]
        command += ["--episodes", "1", "--capture-video", "--video-dir", ".", "--no-cuda", "--torch-threads", "1"]
        # One core for the evaluator, as for its torch: Mesa's software renderer (llvmpipe: MuJoCo under EGL on a machine
        # without a GPU) otherwise starts a render thread per core, and training shares those cores. 2-core Xeon, a
        # Hopper video: 14.8 CPU s against 17.9. A LP_NUM_THREADS of the user's own wins.
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("LP_NUM_THREADS", "1")
        log = open(os.path.join(video_dir, "evaluate.log"), "w")
        process = subprocess.Popen(command, stdout=log, stderr=log, env=env, start_new_session=True, cwd=video_dir)
        self.running = (process, video_dir, log)
        STILL_FILMING[:] = [video_dir]

    def _running_still(self) -> bool:
        if self.running is None:
            return False
        if self.running[0].poll() is None:
            return True
        self._wait()
        return False

    def _wait(self) -> None:
        process, video_dir, log = self.running
        if process.poll() is None:  # said, so the wait is not a silent hang after a Ctrl-C (its checkpoint is written)
            print(f"waiting for the evaluation video still being filmed in {video_dir} ...", flush=True)
        returncode = process.wait()
        log.close()
        video_dir = current_place(video_dir)  # the run folder may have moved meanwhile
        status = "written" if returncode == 0 else f"FAILED (exit {returncode}, see {video_dir}/evaluate.log)"
        self.results.append(f"evaluation video {status}: {video_dir}")
        print(self.results[-1], flush=True)
        if len(self.skipped) > 1:
            first, last = self.skipped[0], self.skipped[-1]
            print(
                f"{len(self.skipped)} evaluation videos skipped while it was filmed (iterations {first} to {last})", flush=True
            )
        self.skipped = []
        self.running = None
        STILL_FILMING.clear()

    def finish(self) -> None:
        """Wait for the evaluator still running, if any."""
        if self.running is not None:
            self._wait()
