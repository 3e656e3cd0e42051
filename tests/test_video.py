"""Evaluation videos: written from real envs, decodable, not blank, never from the training envs."""

import glob
import os
import subprocess
import sys
import time

import pytest
from helpers import decoded_video, only_run_dir, run_script


def test_atari_training_films_evaluation_games_in_a_separate_process(tmp_path):
    result = run_script(
        "ppo_atari_envpool",
        *["--env-id", "Breakout-v5", "--total-timesteps", "1536", "--num-steps", "64", "--max-episode-steps", "120"],
        *["--capture-video", "--video-every", "2", "--log-dir", str(tmp_path)],
    )
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = only_run_dir(tmp_path)
    for iteration in (2, 3):  # every 2 iterations and the last one
        video_dir = os.path.join(run_dir, "videos", f"iteration-{iteration}")
        assert f"evaluation video written: {video_dir}" in result.stdout
        frames = decoded_video(os.path.join(video_dir, "eval-episode-0.mp4"))
        assert frames.shape[1:] == (210, 160, 3)
        # one game at a 120-step limit: the first frame, one per step, plus one per stale step after
        # a life loss (5 lives), which EnvPool's elapsed_step and so the time limit do not count
        assert len(frames) <= 1 + 120 + 5
        assert os.path.isfile(os.path.join(video_dir, "model.cleanrl_model"))


# Three iterations each: a video at iteration 2 (--video-every 2) and one at the last. The MuJoCo runs train with a
# 20-step time limit, and their videos, filmed in Gymnasium, end there too (they ran to Gymnasium's 1,000 before).
FILM_LIMIT = 20
HOPPER = ["--env-id", "Hopper-v4", "--max-episode-steps", str(FILM_LIMIT)]
TRAINING_VIDEO_RUNS = {
    "ppo": ["--env-id", "CartPole-v1", "--total-timesteps", "1536"],
    "ppo_continuous_action": [*HOPPER, "--total-timesteps", "768", "--num-envs", "4", "--num-steps", "64"],
    # one iteration = one env step; training from step 2 on
    "sac_continuous_action_envpool": [*HOPPER, "--total-timesteps", "3", "--learning-starts", "1"],
    "ppo_continuous_action_envpool": [*HOPPER, "--total-timesteps", "1536", "--num-envs", "8", "--num-steps", "64"],
}


@pytest.mark.parametrize("script", sorted(TRAINING_VIDEO_RUNS))
def test_training_films_evaluation_episodes_in_a_separate_process(tmp_path, script):
    result = run_script(
        script, *TRAINING_VIDEO_RUNS[script], "--capture-video", "--video-every", "2", "--log-dir", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = only_run_dir(tmp_path)
    assert sorted(os.listdir(os.path.join(run_dir, "videos"))) == ["iteration-2", "iteration-3"]
    for iteration in (2, 3):
        video_dir = os.path.join(run_dir, "videos", f"iteration-{iteration}")
        assert f"evaluation video written: {video_dir}" in result.stdout
        frames = decoded_video(os.path.join(video_dir, "eval-episode-0.mp4"))
        if "--max-episode-steps" in TRAINING_VIDEO_RUNS[script]:  # the first frame, then one per step
            assert len(frames) <= 1 + FILM_LIMIT
        assert os.path.isfile(os.path.join(video_dir, "model.cleanrl_model"))
        with open(os.path.join(video_dir, "evaluate.log")) as log:  # filmed into "." there, and named in full
            assert f"videos: {video_dir}\n" in log.read()


@pytest.mark.parametrize(
    "script,train_args",
    [
        ("ppo", ["--env-id", "CartPole-v1", "--total-timesteps", "1024"]),
        (
            "ppo_continuous_action_envpool",
            [
                "--env-id",
                "Hopper-v4",
                "--total-timesteps",
                "2048",
                "--num-envs",
                "8",
                "--num-steps",
                "64",
                "--max-episode-steps",
                "50",
            ],
        ),
    ],
)
def test_evaluate_cli_captures_video(tmp_path, script, train_args):
    result = run_script(script, *train_args, "--save-model", "--log-dir", str(tmp_path / "runs"))
    assert result.returncode == 0, result.stderr[-2000:]
    model_path = os.path.join(only_run_dir(tmp_path / "runs"), f"{script}.cleanrl_model")
    video_dir = tmp_path / "videos"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cleanrl_utils.evaluate",
            "--model-path",
            model_path,
            "--episodes",
            "2",
            "--capture-video",
            "--video-dir",
            str(video_dir),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"videos: {video_dir}" in result.stdout
    paths = sorted(glob.glob(str(video_dir / "*.mp4")))
    assert [os.path.basename(p) for p in paths] == ["eval-episode-0.mp4", "eval-episode-1.mp4"]
    for path in paths:
        decoded_video(path)


# --video-every 0: in each script's BAD_INPUT (tests/bad_input.py)


def write_video(path: str, frames: int = 12) -> None:
    import numpy as np

    from cleanrl_utils.video import VideoWriter

    writer = VideoWriter(path, fps=30)
    for i in range(frames):
        writer.append(np.full((64, 96, 3), 20 * i % 256, dtype=np.uint8))
    writer.close()


def test_an_mp4_is_whole_only_to_its_last_byte(tmp_path):
    """mp4_is_whole: a video as ffmpeg writes it is whole; the same bytes cut anywhere short of the end are not
    (a disk that fills at ffmpeg's last write leaves such a file: trial 21, Y2)."""
    from cleanrl_utils.video import mp4_is_whole

    path = str(tmp_path / "v.mp4")
    write_video(path)
    assert mp4_is_whole(path) and len(decoded_video(path)) == 12
    data = open(path, "rb").read()
    cut = str(tmp_path / "cut.mp4")
    for length in [0, 7, 8, 100, len(data) // 2, len(data) - 8, len(data) - 1]:
        with open(cut, "wb") as file:
            file.write(data[:length])
        assert not mp4_is_whole(cut), length
    assert not mp4_is_whole(str(tmp_path / "missing.mp4"))


def test_a_video_without_its_index_is_not_named_whole(tmp_path, monkeypatch):
    """Trial 21, Y2: on a nearly full disk ffmpeg ended without an error but without the file's index, and the
    4,096-byte file was renamed eval-episode-1.mp4, a whole episode by its name. Such a file now fails the close
    and keeps its .partial name."""
    import cleanrl_utils.video as video

    monkeypatch.setattr(video, "mp4_is_whole", lambda path: False)  # as ffmpeg leaves it on a full disk
    with pytest.raises(RuntimeError, match="without its index"):
        write_video(str(tmp_path / "eval-episode-0.mp4"))
    assert os.listdir(tmp_path) == ["eval-episode-0.partial.mp4"]


def test_a_video_whose_folder_moves_while_it_is_filmed_is_named_whole_where_the_folder_went(tmp_path):
    """Trial 21, Y6: a run folder moved while its evaluation video was filmed: the evaluator's rename to the whole
    name failed (FileNotFoundError, the old path), and a whole episode stayed .partial.mp4."""
    import numpy as np

    from cleanrl_utils.video import VideoWriter

    writer = VideoWriter(str(tmp_path / "run" / "videos" / "eval-episode-0.mp4"), fps=30)
    for i in range(6):
        writer.append(np.full((64, 96, 3), 40 * i, dtype=np.uint8))
    deadline = time.time() + 30
    while not os.path.exists(writer.partial_path) and time.time() < deadline:  # ffmpeg opens it at its first frame
        time.sleep(0.05)
    (tmp_path / "run").rename(tmp_path / "moved")
    for i in range(6):
        writer.append(np.full((64, 96, 3), 40 * i, dtype=np.uint8))
    writer.close()
    assert os.listdir(tmp_path / "moved" / "videos") == ["eval-episode-0.mp4"] and not (tmp_path / "run").exists()
    assert writer.path == str(tmp_path / "moved" / "videos" / "eval-episode-0.mp4")
    assert len(decoded_video(writer.path)) == 12
