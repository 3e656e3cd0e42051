"""cleanrl_utils.evaluate on a real JAX training checkpoint (issue 16, defect 10), its thread setting,
and its one-line errors."""

import glob
import os
import subprocess
import sys

import pytest
import torch
from helpers import REPO, assert_one_error_line, one_line_exit, only_run_dir, run_script

import cleanrl_utils.evaluate as evaluate_module


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory) -> str:
    """A finished two-iteration run of the continuous JAX script: checkpoint.msgpack and the saved model."""
    log_dir = tmp_path_factory.mktemp("jax_runs")
    result = run_script(
        "ppo_continuous_action_envpool_xla_jax",
        *["--env-id", "Hopper-v4", "--total-timesteps", "1024", "--num-envs", "8", "--num-steps", "64"],
        *["--max-episode-steps", "50", "--save-model", "--log-dir", str(log_dir)],
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = only_run_dir(log_dir)
    assert os.path.isfile(os.path.join(run_dir, "checkpoint.msgpack"))
    return run_dir


def evaluate_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.evaluate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def test_a_jax_training_checkpoint_evaluates_like_the_saved_model(jax_run):
    checkpoint = evaluate_cli("--model-path", os.path.join(jax_run, "checkpoint.msgpack"), "--episodes", "3")
    assert checkpoint.returncode == 0, checkpoint.stderr[-2000:]  # was: KeyError
    assert "mean return over 3 episodes" in checkpoint.stdout
    # the final checkpoint and the saved model hold the same parameters and observation statistics
    model_path = glob.glob(os.path.join(jax_run, "*.cleanrl_model"))[0]
    model = evaluate_cli("--model-path", model_path, "--episodes", "3")
    assert model.returncode == 0, model.stderr[-2000:]
    returns = [line for line in checkpoint.stdout.splitlines() if line.startswith("episode ")]
    assert len(returns) == 3 and returns == [line for line in model.stdout.splitlines() if line.startswith("episode ")]


def test_an_unwritable_video_dir_gives_one_line(jax_run, tmp_path, monkeypatch):
    (tmp_path / "a_file").write_text("")
    model_path = os.path.join(jax_run, "checkpoint.msgpack")
    video_dir = str(tmp_path / "a_file" / "videos")
    result = evaluate_cli("--model-path", model_path, "--capture-video", "--video-dir", video_dir)
    assert_one_error_line(result, [f"--video-dir {video_dir!r} is not a writable folder (NotADirectoryError"])
    for video_dir in ("/proc/cleanrl-test/videos", "/sys/cleanrl-videos"):
        monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", model_path, "--capture-video", "--video-dir", video_dir])
        one_line_exit(evaluate_module.main, f"--video-dir {video_dir!r} is not a writable folder")


def test_model_path_errors_give_one_line(tmp_path, monkeypatch):
    evaluate = evaluate_module.evaluate
    one_line_exit(lambda: evaluate(str(tmp_path / "missing.cleanrl_model")), "--model-path", "does not exist")
    (tmp_path / "junk.cleanrl_model").write_bytes(os.urandom(500))
    one_line_exit(lambda: evaluate(str(tmp_path / "junk.cleanrl_model")), "is not a readable .cleanrl_model file")
    torch.save({"script": "not_a_script", "model_state_dict": {}, "args": {}}, tmp_path / "other.cleanrl_model")
    one_line_exit(lambda: evaluate(str(tmp_path / "other.cleanrl_model")), "no evaluator for script 'not_a_script'")
    torch.save({"script": "ppo", "model_state_dict": {}}, tmp_path / "no_args.cleanrl_model")
    one_line_exit(lambda: evaluate(str(tmp_path / "no_args.cleanrl_model")), "(no training args)")
    one_line_exit(lambda: evaluate(str(tmp_path / "other.cleanrl_model"), episodes=0), "--episodes must be a positive")
    monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", "m.cleanrl_model", "--torch-threads", "-1"])
    one_line_exit(evaluate_module.main, "--torch-threads must be >= 0 (0 = auto), got -1")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"")  # the last checkpoint only: nothing was kept
    monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", str(tmp_path / "run")])
    one_line_exit(evaluate_module.main, "is a folder without kept checkpoints", "--keep-checkpoints")
    monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", str(tmp_path / "run"), "--capture-video"])
    one_line_exit(evaluate_module.main, "--capture-video films one model: give a file, not the folder")


@pytest.mark.parametrize(
    "flags,omp,expected",
    [
        (["--torch-threads", "1"], None, 1),
        (["--torch-threads", "3"], "2", 3),
        ([], "1", 1),  # auto: OMP_NUM_THREADS, as cleanrl_utils.benchmark sets it
        ([], None, len(os.sched_getaffinity(0))),
    ],
)
def test_torch_threads(monkeypatch, capsys, flags, omp, expected):
    seen = []

    def fake_evaluate(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return [1.0]

    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    monkeypatch.setattr(evaluate_module, "evaluate", fake_evaluate)
    monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", "m.cleanrl_model", *flags])
    before = torch.get_num_threads()
    try:
        evaluate_module.main()
    finally:
        torch.set_num_threads(before)
    assert seen == [expected]
    assert "mean return over 1 episodes: 1.00" in capsys.readouterr().out


def test_many_episodes_play_in_rounds_on_a_bounded_number_of_envs(tmp_path, monkeypatch):
    """--episodes 100000 made one env per episode and ran out of memory (issue 25, defect 10)."""
    import cleanrl.ppo as ppo

    torch.manual_seed(0)
    model_path = str(tmp_path / "ppo.cleanrl_model")
    agent = ppo.Agent(4, 2)
    torch.save(
        {"script": "ppo", "args": {"env_id": "CartPole-v1", "max_episode_steps": 0}, "model_state_dict": agent.state_dict()},
        model_path,
    )
    env_counts = []

    def counting_make_env(env_id, num_envs, *args):
        env_counts.append(num_envs)
        return make_env(env_id, num_envs, *args)

    make_env = ppo.make_env
    monkeypatch.setattr(ppo, "make_env", counting_make_env)
    episodes = 3 * evaluate_module.MAX_EVAL_ENVS + 5
    returns = evaluate_module.evaluate(model_path, episodes=episodes, seed=1, cuda=False)
    assert env_counts == [evaluate_module.MAX_EVAL_ENVS]
    assert len(returns) == episodes and all(r >= 1 for r in returns)  # CartPole pays 1 per step: every episode ran
    assert len(set(returns)) > 10  # the later rounds play new episodes, not the first round's again
