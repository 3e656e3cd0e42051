"""The single-file promise (issue 26): copy a script to a new name outside `cleanrl/`, change its network, and it
trains, saves, evaluates and films itself, with no edit anywhere else. `cleanrl_utils.evaluate` imports the script
whose path the saved model records and plays that script's own `evaluation_player`; no table names scripts."""

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, one_line_exit, only_run_dir

from cleanrl_utils.evaluate import evaluate


def narrowed(source: str, layer: str, width: str, new_width: str) -> str:
    """`source` with every `width` among a `layer` call's first arguments (its sizes) made `new_width`."""
    return re.sub(rf"{re.escape(layer)}[^()]*", lambda call: re.sub(rf"\b{width}\b", new_width, call.group()), source)


# Hopper, 2 x 64 steps, and a 30-step limit: the videos (MuJoCo rendered in software, 0.1 s a frame) end there too
BRIEF_HOPPER = ["--env-id", "Hopper-v4", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "256"]
BRIEF_HOPPER += ["--max-episode-steps", "30"]

# script -> (its narrower copy: a function of the source, the training flags of a brief run, a weight that must have
# the new width in the saved model, that width)
COPIES = {
    "on-policy": (
        "ppo_continuous_action_envpool",
        lambda source: narrowed(source, "nn.Linear(", "64", "32"),
        BRIEF_HOPPER,
        ("actor_mean.0.weight", 32),
    ),
    "off-policy": (
        "sac_continuous_action_envpool",
        lambda source: narrowed(source, "nn.Linear(", "256", "64"),
        ["--env-id", "Pendulum-v1", "--total-timesteps", "300", "--learning-starts", "200", "--batch-size", "32"],
        ("trunk.0.weight", 64),
    ),
    "jax": (
        "ppo_continuous_action_envpool_xla_jax",
        lambda source: narrowed(source, "nn.Dense(", "64", "32"),
        BRIEF_HOPPER,
        None,  # flax parameters: checked through the original script refusing the file
    ),
}


def python(*args: str, cwd, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


@pytest.fixture(scope="module", params=list(COPIES))
def copied_run(request, tmp_path_factory):
    """A copy of the script, narrowed, in a folder of its own (not `cleanrl/`, not the repository), trained briefly
    from there with --save-model --capture-video (the last iteration is filmed during training)."""
    original, narrow, flags, _ = COPIES[request.param]
    folder = tmp_path_factory.mktemp(f"experiments_{request.param.replace('-', '_')}")
    source = open(os.path.join(REPO, "cleanrl", f"{original}.py")).read()
    copy = folder / f"my_{request.param.replace('-', '_')}.py"
    copy.write_text(narrow(source))
    assert copy.read_text() != source
    result = python(str(copy), *flags, "--save-model", "--capture-video", "--log-dir", str(folder / "runs"), cwd=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    return request.param, copy, only_run_dir(folder / "runs"), result.stdout


def test_the_copy_records_itself_and_films_during_training(copied_run):
    kind, copy, run_dir, stdout = copied_run
    model_path = os.path.join(run_dir, f"{copy.stem}.cleanrl_model")
    assert "evaluation video written" in stdout, stdout
    assert any(name.endswith(".mp4") for _, _, names in os.walk(os.path.join(run_dir, "videos")) for name in names)
    if kind != "jax":
        import torch

        saved = torch.load(model_path, weights_only=True)
        weight, width = COPIES[kind][3]
        assert saved["script"] == copy.stem and saved["script_path"] == os.path.realpath(copy)
        assert saved["model_state_dict"][weight].shape[0] == width  # the copy's network, not the original's
        checkpoint = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
        assert checkpoint["script_path"] == os.path.realpath(copy)


def test_the_copy_evaluates_and_films_its_model_from_another_folder(copied_run, tmp_path):
    kind, copy, run_dir, _ = copied_run
    model_path = os.path.join(run_dir, f"{copy.stem}.cleanrl_model")
    video_dir = str(tmp_path / "videos")
    command = ["-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "2"]
    result = python(*command, "--capture-video", "--video-dir", video_dir, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Warning" not in result.stderr, result.stderr  # no v4 advice from Gymnasium, no fork warning from JAX
    returns = [float(line.split()[-1]) for line in result.stdout.splitlines() if line.startswith("episode ")]
    assert len(returns) == 2 and all(np.isfinite(returns)), result.stdout
    assert sorted(os.listdir(video_dir)) == ["eval-episode-0.mp4", "eval-episode-1.mp4"]
    # The original script builds the original network: it cannot play the copy's file, so the copy's player did.
    original = os.path.join(REPO, "cleanrl", f"{COPIES[kind][0]}.py")
    refused = lambda: evaluate(model_path, episodes=1, cuda=False, script=original)  # noqa: E731
    one_line_exit(refused, "does not fit the network and env", COPIES[kind][0])


def test_a_model_file_without_its_script_path_says_how_to_evaluate_it(copied_run, tmp_path):
    """Files written before models recorded their script's path: a script of that name in this clone's `cleanrl/`
    plays them (the other tests of evaluate use such files); for any other name, one line says to pass --script."""
    kind, copy, run_dir, _ = copied_run
    if kind == "jax":
        pytest.skip("the torch copies cover the file format's fallback")
    import torch

    saved = torch.load(os.path.join(run_dir, f"{copy.stem}.cleanrl_model"), weights_only=True)
    del saved["script_path"]
    old_file = str(tmp_path / "old.cleanrl_model")
    torch.save(saved, old_file)
    one_line_exit(lambda: evaluate(old_file, episodes=1, cuda=False), f"written by '{copy.stem}'", "pass --script")
    assert len(evaluate(old_file, episodes=1, cuda=False, script=str(copy))) == 1


def test_a_moved_script_is_found_with_script(copied_run, tmp_path):
    kind, copy, run_dir, _ = copied_run
    if kind != "on-policy":
        pytest.skip("one script is enough to move")
    moved = tmp_path / copy.name
    shutil.move(copy, moved)
    try:
        model_path = os.path.join(run_dir, f"{copy.stem}.cleanrl_model")
        one_line_exit(lambda: evaluate(model_path, episodes=1, cuda=False), str(copy), "pass --script")
        assert len(evaluate(model_path, episodes=1, cuda=False, script=str(moved))) == 1
    finally:
        shutil.move(moved, copy)
