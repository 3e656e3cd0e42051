"""cleanrl_utils.evaluate on a real JAX training checkpoint (issue 16, defect 10), its thread setting,
and its one-line errors."""

import glob
import os
import re
import select
import signal
import subprocess
import sys

import numpy as np
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
        *["--max-episode-steps", "50", "--save-model", "--checkpoint-every", "1", "--keep-checkpoints"],
        *["--log-dir", str(log_dir)],
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


def test_a_jax_run_keeps_its_checkpoints_and_its_folder_evaluates(jax_run, capsys):
    kept = evaluate_module.kept_checkpoints(jax_run)
    assert [(step, os.path.basename(path)) for step, path in kept] == [
        (512, "checkpoint-000000512.msgpack"),
        (1024, "checkpoint-000001024.msgpack"),
    ]
    args = evaluate_module.EvalArgs(model_path=jax_run, episodes=2, cuda=False)
    assert evaluate_module.evaluate_kept_checkpoints(jax_run, args)[0] in (512, 1024)
    assert capsys.readouterr().out.count("mean return over 2 episodes") == 2


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
    # trial 19 cosmetic: a truncated checkpoint.pt was called "not a readable .cleanrl_model file"
    one_line_exit(lambda: evaluate(str(tmp_path / "junk.cleanrl_model")), "is not readable as a model file or checkpoint")

    # trial 22 cosmetic C1: a model moved away between evaluate's check and its read was called "not readable"
    vanishing = tmp_path / "vanishing.cleanrl_model"
    vanishing.write_bytes(b"x")

    def flax_reader_while_the_file_is_moved(path):
        os.remove(path)

    with monkeypatch.context() as patch:
        patch.setattr(evaluate_module, "load_flax_checkpoint", flax_reader_while_the_file_is_moved)
        one_line_exit(lambda: evaluate(str(vanishing)), "--model-path", "no longer exists: it was moved or deleted")
    torch.save({"script": "not_a_script", "model_state_dict": {}, "args": {}}, tmp_path / "other.cleanrl_model")
    one_line_exit(
        lambda: evaluate(str(tmp_path / "other.cleanrl_model")), "written by 'not_a_script' (a file from before", "--script"
    )
    (tmp_path / "no_player.py").write_text("SCRIPT = 'no_player'\n")  # a script without evaluation_player
    one_line_exit(
        lambda: evaluate(str(tmp_path / "other.cleanrl_model"), script=str(tmp_path / "no_player.py")),
        "defines no evaluation_player(saved, *, num_envs, seed, device, greedy, epsilon, render)",
    )
    one_line_exit(
        lambda: evaluate(str(tmp_path / "other.cleanrl_model"), script="missing.py"), "--script 'missing.py' does not exist"
    )
    one_line_exit(  # trial 4, N3: a folder was reported as missing
        lambda: evaluate(str(tmp_path / "other.cleanrl_model"), script=str(tmp_path)), "is a folder; give the .py file"
    )
    (tmp_path / "notes.md").write_text("# not a script\n")  # was: AttributeError from importlib
    one_line_exit(
        lambda: evaluate(str(tmp_path / "other.cleanrl_model"), script=str(tmp_path / "notes.md")), "not a Python script"
    )
    (tmp_path / "broken.py").write_text("def evaluation_player(:\n")  # was: a traceback through evaluate's own code
    one_line_exit(
        lambda: evaluate(str(tmp_path / "other.cleanrl_model"), script=str(tmp_path / "broken.py")),
        "broken.py' does not import: SyntaxError",
        "line 1",
    )
    torch.save({"script": "ppo", "model_state_dict": {}}, tmp_path / "no_args.cleanrl_model")
    one_line_exit(lambda: evaluate(str(tmp_path / "no_args.cleanrl_model")), "(no training args)")
    one_line_exit(lambda: evaluate(str(tmp_path / "other.cleanrl_model"), episodes=0), "--episodes must be a positive")
    monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", "m.cleanrl_model", "--torch-threads", "-1"])
    one_line_exit(evaluate_module.main, "--torch-threads must be in 0..", "got -1")
    # was: --epsilon dropped in silence, the greedy result reported
    monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", "m.cleanrl_model", "--greedy", "--epsilon", "1.0"])
    one_line_exit(evaluate_module.main, "--greedy plays with epsilon 0, --epsilon 1.0 asks for another")
    # trial 8, S3: --video-dir without --capture-video was ignored in silence
    monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", "m.cleanrl_model", "--video-dir", str(tmp_path / "v")])
    one_line_exit(evaluate_module.main, "--video-dir", "needs --capture-video")
    assert not (tmp_path / "v").exists()
    # trial 17: an empty --video-dir was taken as the default folder beside the model
    monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", "m.cleanrl_model", "--capture-video", "--video-dir", ""])
    one_line_exit(evaluate_module.main, "--video-dir '' is empty")
    # trial 9, T4: a refused model or --episodes left the (nested) --video-dir it had made before checking them
    for flags, fragment in (([], "does not exist"), (["--episodes", "0"], "--episodes must be a positive")):
        model = str(tmp_path / ("missing.cleanrl_model" if not flags else "other.cleanrl_model"))
        video_dir = str(tmp_path / "vnest" / "a" / "b")
        monkeypatch.setattr(
            sys, "argv", ["evaluate", "--model-path", model, "--capture-video", "--video-dir", video_dir, *flags]
        )
        one_line_exit(evaluate_module.main, fragment)
        assert not (tmp_path / "vnest").exists()
    monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", "m.cleanrl_model", "--torch-threads", "-1"])
    one_line_exit(evaluate_module.main, "--torch-threads must be in 0..", "got -1")
    monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", "m.cleanrl_model", "--torch-threads", "100000"])
    one_line_exit(evaluate_module.main, "--torch-threads must be in 0..", "got 100000")  # trial 11 N4: a segfault
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"")  # the last checkpoint only: nothing was kept
    monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", str(tmp_path / "run")])
    one_line_exit(evaluate_module.main, "is a folder without kept checkpoints", "--keep-checkpoints")
    (tmp_path / "run" / "ppo.cleanrl_model").write_bytes(b"")  # trial 16: the line points at what the folder holds
    held = f"give one of its files instead: {tmp_path / 'run' / 'checkpoint.pt'}, {tmp_path / 'run' / 'ppo.cleanrl_model'}"
    one_line_exit(evaluate_module.main, "is a folder without kept checkpoints", held)
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
    assert "mean return over 1 episode: 1.00" in capsys.readouterr().out


def test_many_episodes_play_in_rounds_on_a_bounded_number_of_envs(tmp_path, monkeypatch, capsys):
    """--episodes 100000 made one env per episode and ran out of memory (issue 25, defect 10). Each round says how far
    it got (every round here: no wait between lines), and the stop line's entry goes at the end (trial 28)."""
    import cleanrl.ppo as ppo
    from cleanrl_utils.stop import LEFT_BEHIND

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
    monkeypatch.setattr(evaluate_module, "PROGRESS_SECONDS", 0)
    episodes = 3 * evaluate_module.MAX_EVAL_ENVS + 5
    returns = evaluate_module.evaluate(model_path, episodes=episodes, seed=1, cuda=False)
    assert env_counts == [evaluate_module.MAX_EVAL_ENVS]
    assert len(returns) == episodes and all(r >= 1 for r in returns)  # CartPole pays 1 per step: every episode ran
    assert len(set(returns)) > 10  # the later rounds play new episodes, not the first round's again
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"playing {episodes} episodes, 32 at a time" and len(lines) == 4
    for line, played in zip(lines[1:], (32, 64, 96)):
        head = f"{played} of {episodes} episodes played: mean return {np.mean(returns[:played]):.2f} +- "
        assert line.startswith(head), line
    assert LEFT_BEHIND == []


def test_a_sigterm_during_many_episodes_says_what_was_played(tmp_path):
    """Trial 28, cosmetic: --episodes 10^20 printed nothing, and a SIGTERM's line dropped every finished episode."""
    import cleanrl.ppo as ppo

    torch.manual_seed(0)
    model_path = str(tmp_path / "ppo.cleanrl_model")
    args = {"env_id": "CartPole-v1", "max_episode_steps": 0}
    torch.save({"script": "ppo", "args": args, "model_state_dict": ppo.Agent(4, 2).state_dict()}, model_path)
    command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "100000"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    ready, _, _ = select.select([process.stdout], [], [], 60)  # the first line comes at once, the first round's soon
    if not ready:
        process.kill()
        raise AssertionError(f"no line within 60 s: {process.communicate()}")
    assert process.stdout.readline() == "playing 100,000 episodes, 32 at a time\n"
    first = process.stdout.readline()
    assert first.startswith("32 of 100,000 episodes played: mean return "), first
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    assert re.fullmatch(
        r"\nSIGTERM: cleanrl_utils.evaluate stopped; [\d,]+ of 100,000 episodes played: mean return [\d.]+ \+- [\d.]+\n",
        stderr,
    ), stderr


def test_a_stop_during_the_first_round_of_long_games_says_none_was_played(tmp_path):
    """Trial 29, cosmetic: --episodes 1000 on Pong printed nothing for 40 s (32 games at a time, none over yet), and
    a SIGTERM's line did not say that none of the 1,000 was played. Now the first line comes at once, and says so."""
    import cleanrl.ppo_atari_envpool as ppo_atari

    torch.manual_seed(0)
    model_path = str(tmp_path / "ppo_atari_envpool.cleanrl_model")
    args = {"env_id": "Pong-v5", "max_episode_steps": 27_000, "channels_last": "off", "precision": "fp32"}
    torch.save({"script": "ppo_atari_envpool", "args": args, "model_state_dict": ppo_atari.Agent(6).state_dict()}, model_path)
    command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "1000"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    ready, _, _ = select.select([process.stdout], [], [], 60)
    if not ready:
        process.kill()
        raise AssertionError(f"no line within 60 s: {process.communicate()}")
    assert process.stdout.readline() == "playing 1,000 episodes, 32 at a time\n"
    process.send_signal(signal.SIGTERM)  # 32 Pong games take minutes: the first round is under way
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    assert stderr == "\nSIGTERM: cleanrl_utils.evaluate stopped; 0 of 1,000 episodes played\n", stderr


def test_a_model_that_does_not_fit_its_script_gives_one_line(tmp_path):
    """Issue 25, traceback 6: weights, normaliser or env that do not fit the network the recorded script builds
    (another script's file, or an edited one) gave raw load_state_dict errors and AttributeError."""
    from cleanrl import ppo_atari_envpool, ppo_continuous_action_envpool

    def saved(path, script, args, **parts):
        torch.save({"script": script, "args": vars(args)} | parts, tmp_path / path)
        return str(tmp_path / path)

    hopper = ppo_continuous_action_envpool.Agent(11, 3)
    rms = ppo_continuous_action_envpool.RunningMeanStd((11,)).state_dict()
    hopper_args = ppo_continuous_action_envpool.Args(env_id="Hopper-v4")
    pong = ppo_atari_envpool.Agent(6).state_dict()
    cases = {
        # Hopper's weights recorded as HalfCheetah's (17 observations, 6 actions): size mismatch
        saved("cheetah.cleanrl_model", "ppo_continuous_action_envpool", ppo_continuous_action_envpool.Args(env_id="HalfCheetah-v4"),
              model_state_dict=hopper.state_dict(), obs_rms=rms): ("'HalfCheetah-v4'", "RuntimeError", "size mismatch"),
        # without its observation normaliser
        saved("no_rms.cleanrl_model", "ppo_continuous_action_envpool", hopper_args, model_state_dict=hopper.state_dict()):
            ("'Hopper-v4'", "KeyError"),
        # PPO's Atari weights under DQN's name: missing and unexpected keys
        saved("dqn.cleanrl_model", "dqn_atari_envpool", ppo_atari_envpool.Args(env_id="Pong-v5"), model_state_dict=pong):
            ("dqn_atari_envpool builds for 'Pong-v5'", "RuntimeError"),
        # PPO's Atari weights recorded with a MuJoCo id
        saved("mujoco.cleanrl_model", "ppo_atari_envpool", ppo_atari_envpool.Args(env_id="Hopper-v4"), model_state_dict=pong):
            ("ppo_atari_envpool builds for 'Hopper-v4'",),
    }  # fmt: skip
    for path, fragments in cases.items():
        one_line_exit(
            lambda: evaluate_module.evaluate(path, episodes=1, cuda=False),
            f"error: --model-path {path!r} does not fit",
            *fragments,
            "another script",
        )


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("Resource temporarily unavailable"),
        MemoryError(),
        OSError(11, "Resource temporarily unavailable"),
        RuntimeError("Cannot allocate memory"),  # trial 12, P3: OMP_NUM_THREADS=100000
        ImportError("libx.so: failed to map segment from shared object"),  # trial 12, P3: under `ulimit -v`
    ],
)
def test_a_machine_that_refuses_threads_or_memory_is_not_blamed_on_the_model_file(tmp_path, monkeypatch, error):
    """A campaign's periodic test, run while another process had taken the machine's threads, said its good
    checkpoint "does not fit the network and env ... was it written by another script, or edited?" for EnvPool's
    RuntimeError: Resource temporarily unavailable. The line now names the machine, not the file."""
    import cleanrl.ppo as ppo

    model_path = str(tmp_path / "ppo.cleanrl_model")
    args = {"env_id": "CartPole-v1", "max_episode_steps": 0}
    torch.save({"script": "ppo", "args": args, "model_state_dict": ppo.Agent(4, 2).state_dict()}, model_path)

    def refused(*args, **kwargs):
        raise error

    monkeypatch.setattr(ppo, "evaluation_player", refused)
    monkeypatch.setattr(evaluate_module, "import_script", lambda path: ppo)
    line = one_line_exit(lambda: evaluate_module.evaluate(model_path, episodes=1, cuda=False), "the machine refused")
    assert "does not fit" not in line and "'CartPole-v1'" in line and type(error).__name__ in line


@pytest.mark.parametrize("failing", ["load_flax_checkpoint", "import_script"])
def test_a_library_the_machine_cannot_load_is_one_line_naming_the_machine(tmp_path, monkeypatch, failing):
    """Trial 13: under `ulimit -v 800000` the import of flax, which reads a JAX model, failed with "failed to map
    segment" as a 22-line traceback, outside the player's set-up that names the machine. An ImportError that is
    not the machine's stays a traceback."""
    model = tmp_path / "ppo.cleanrl_model"
    model.write_bytes(b"not read")
    monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", str(model), "--episodes", "1", "--torch-threads", "1"])

    def refused(*args, **kwargs):
        raise ImportError("libjax_common.so: failed to map segment from shared object")

    monkeypatch.setattr(evaluate_module, failing, refused)
    if failing == "import_script":  # the file read; the script's own imports (torch, EnvPool) fail
        monkeypatch.setattr(evaluate_module, "load_checkpoint", lambda path: {"args": {}})
        monkeypatch.setattr(evaluate_module, "find_script", lambda *args: "cleanrl/ppo.py")
    line = one_line_exit(evaluate_module.main, "the machine refused memory or threads", "failed to map segment")
    assert str(model) in line and "not read wrong" in line

    def broken(*args, **kwargs):
        raise ImportError("No module named 'somewhere'")

    monkeypatch.setattr(evaluate_module, failing, broken)
    with pytest.raises(ImportError):
        evaluate_module.main()


def test_a_script_whose_libraries_the_machine_cannot_load_is_not_blamed(tmp_path, monkeypatch):
    """Trial 14: under `ulimit -v 1000000` the JAX script's own imports failed to map jaxlib, and evaluate said "the
    script ... does not import", blaming a good script. A script that truly does not import is still named."""
    model = tmp_path / "m.cleanrl_model"
    model.write_bytes(b"not read")
    monkeypatch.setattr(sys, "argv", ["evaluate", "--model-path", str(model), "--episodes", "1", "--torch-threads", "1"])
    monkeypatch.setattr(evaluate_module, "load_checkpoint", lambda path: {"args": {}})
    for name, raised, expected in (
        ("mapped.py", "ImportError('libjax_common.so: failed to map segment from shared object')", "the machine refused"),
        ("missing.py", "ImportError('No module named somewhere')", "does not import: ImportError"),
    ):
        script = tmp_path / name
        script.write_text(f"raise {raised}\n")
        monkeypatch.setattr(evaluate_module, "find_script", lambda *args, path=str(script): path)
        one_line_exit(evaluate_module.main, expected)


def test_a_jax_model_under_an_address_space_limit_jax_cannot_run_in_is_one_line(jax_run, monkeypatch):
    """Trial 14: under `ulimit -v` of 1.2-2 GB a JAX model's evaluation ended in XLA's C++ abort or a segfault (exit
    134, 139), no line. A limit below what JAX needs is now refused before JAX runs; a torch model is not held to it."""
    import resource

    model = glob.glob(os.path.join(jax_run, "*.cleanrl_model"))[0]
    limit = 1_500_000 * 1024
    monkeypatch.setattr(resource, "getrlimit", lambda which: (limit, resource.RLIM_INFINITY))
    one_line_exit(lambda: evaluate_module.load_checkpoint(model), "this process may map 1,464 MiB (ulimit -v)", "JAX needs")
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert evaluate_module.load_checkpoint(model)["script"] == "ppo_continuous_action_envpool_xla_jax"


def test_jax_evaluation_draws_a_new_key_for_every_policy_call(jax_run):
    """The JAX players fold a call counter into the evaluation key, a stream without end (a pre-split array of 10^6
    keys ran out in a long evaluation: 32 Atari games of up to 27,000 steps each). The same observations played
    twice get different sampled actions, and a new player on the same seed repeats them."""
    import numpy as np

    saved = evaluate_module.load_checkpoint(glob.glob(os.path.join(jax_run, "*.cleanrl_model"))[0])
    script = evaluate_module.import_script(evaluate_module.find_script(saved, "model", None))

    def two_calls() -> list[np.ndarray]:
        player = script.evaluation_player(saved, num_envs=2, seed=3, device=None, greedy=False, epsilon=0.0, render=False)
        obs, _ = player.envs.reset()
        actions = [player.act(obs), player.act(obs)]
        player.envs.close()
        return actions

    first, second = two_calls()
    assert not np.allclose(first, second)
    np.testing.assert_allclose(np.stack(two_calls()), np.stack([first, second]), rtol=1e-5, atol=1e-6)


def test_evaluate_names_no_script():
    """The dispatch table is gone: every script plays its own models (tests/test_copied_script.py)."""
    source = open(evaluate_module.__file__).read()
    names = [name[: -len(".py")] for name in os.listdir(os.path.join(REPO, "cleanrl")) if not name.startswith("__")]
    assert names and not [name for name in names if re.search(rf"\b{name}\b", source)]


def test_an_error_while_episodes_play_is_not_blamed_on_the_model_file(jax_run, monkeypatch):
    """Only set-up errors (weights, normaliser, env that do not fit) become the one "does not fit" line; an error
    raised once episodes play keeps its own type and traceback."""

    def broken_round(*args, **kwargs):
        raise RuntimeError("boom while playing")

    monkeypatch.setattr(evaluate_module, "play_round", broken_round)
    model_path = glob.glob(os.path.join(jax_run, "*.cleanrl_model"))[0]
    with pytest.raises(RuntimeError, match="boom while playing"):
        evaluate_module.evaluate(model_path, episodes=1, cuda=False)


@pytest.mark.parametrize("seed", [-4, 99_999_999_999])
def test_an_evaluation_seed_out_of_range_is_one_line(seed):
    # was: a traceback from Gymnasium (negative) or EnvPool (past int32); checked before the file is read
    one_line_exit(lambda: evaluate_module.evaluate("no such file", seed=seed), "--seed must be in 0..", f"got {seed}")


def test_ctrl_c_while_filming_stops_in_one_line_that_names_the_videos(tmp_path):
    """Trial 10, D3: Ctrl-C to `python -m cleanrl_utils.evaluate` printed a KeyboardInterrupt traceback and left
    partial videos with nothing saying so. A real CartPole model, filmed: the signal lands while it plays."""
    import time

    import cleanrl.ppo as ppo

    torch.manual_seed(0)
    model_path = str(tmp_path / "ppo.cleanrl_model")
    args = {"env_id": "CartPole-v1", "max_episode_steps": 0}
    torch.save({"script": "ppo", "args": args, "model_state_dict": ppo.Agent(4, 2).state_dict()}, model_path)
    video_dir = tmp_path / "videos"
    command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "100000"]
    command += ["--capture-video", "--video-dir", str(video_dir), "--torch-threads", "1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    deadline = time.time() + 120
    while not video_dir.exists() and time.time() < deadline and process.poll() is None:  # made just before playing
        time.sleep(0.2)
    time.sleep(1)
    assert process.poll() is None, process.communicate()
    process.send_signal(2)  # SIGINT
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    lines = [line for line in stderr.splitlines() if line.strip() and "warn" not in line.lower()]
    # the episodes of the rounds played so far, where a round had ended (trial 28)
    lines = [re.sub(r"; [\d,]+ of 100,000 episodes played: mean return [\d.]+ \+- [\d.]+", "", line) for line in lines]
    if video_dir.exists():  # ffmpeg had written a file: the line names them
        assert lines == [
            f"Ctrl-C: cleanrl_utils.evaluate stopped; {video_dir} holds the videos: each eval-episode-<n>.mp4 a whole "
            "episode, and an episode a Ctrl-C or SIGTERM cut short, if any, as eval-episode-<n>.partial.mp4"
        ], stderr
    else:  # not yet (CartPole is filmed in Gymnasium after all its episodes are played)
        assert lines == [f"Ctrl-C: cleanrl_utils.evaluate stopped; removed {video_dir}, where nothing was written"], stderr


class EnvsStoppedAtStep:
    """Three envs whose episodes end at steps 2 and 5 and never; a Ctrl-C (KeyboardInterrupt) arrives at step 8.
    Each env renders frames of its own constant shade, brighter each step, so a video's frames count the steps."""

    def __init__(self, ends=(2, 5, None), stop_at=8):
        self.ends, self.stop_at, self.t = ends, stop_at, 0

    def render(self, env_ids):
        import numpy as np

        return [np.full((16, 16, 3), 10 * self.t + 60 * int(i), dtype=np.uint8) for i in env_ids]

    def step(self, actions):
        import numpy as np

        self.t += 1
        if self.t == self.stop_at:
            raise KeyboardInterrupt
        ended = np.array([end == self.t for end in self.ends])
        return np.zeros(3), np.ones(3), ended, np.zeros(3, dtype=bool), {}


def test_a_stop_leaves_whole_episodes_under_their_names_and_cut_ones_marked_partial(tmp_path):
    """Trial 11: evaluate films a round of episodes at once, and a Ctrl-C left every video of the round under its
    final name, cut short, while the stop's line said only the last one might be. Now each episode's video takes
    its own name when the episode ends, and one cut short stays `.partial.mp4`."""
    import imageio.v3 as iio

    with pytest.raises(KeyboardInterrupt):
        evaluate_module.play_round(
            EnvsStoppedAtStep(), lambda obs: obs, obs=[0, 0, 0], playing=3, first_episode=0, whole_games=False,
            video_dir=str(tmp_path),
        )  # fmt: skip
    assert sorted(os.listdir(tmp_path)) == ["eval-episode-0.mp4", "eval-episode-1.mp4", "eval-episode-2.partial.mp4"]
    # the reset frame and one per step to the end: 3 and 6 frames
    assert [len(iio.imread(tmp_path / f"eval-episode-{i}.mp4")) for i in (0, 1)] == [3, 6]


def test_help_gives_each_flag_one_default():
    """Trial 10, C1: the flags whose default is worked out at run time showed it twice, the second time as None."""
    result = subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.evaluate", "--help"], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0
    assert "(default: None)" not in result.stdout
    for hint in ("videos/ beside the model", "0.05, as CleanRL evaluates DQN", "the one the file records"):
        assert hint in " ".join(result.stdout.replace("│", " ").split()), hint


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a file every write to fails with ENOSPC")
@pytest.mark.parametrize("given", ["path", "."])
def test_a_full_disk_while_filming_is_one_line(tmp_path, given):
    """Trial 19, W3: on a full disk, ffmpeg died and evaluate's next write to its pipe ended evaluate through SIGPIPE
    (exit 141) with no word at all. The video file is linked to /dev/full, where every write fails as on a full disk.
    A training run's evaluator films into "." (its video folder): the line named the folder "." (trial 24, K8)."""
    import cleanrl.ppo as ppo

    torch.manual_seed(0)
    model_path = str(tmp_path / "ppo.cleanrl_model")
    args = {"env_id": "CartPole-v1", "max_episode_steps": 0}
    torch.save({"script": "ppo", "args": args, "model_state_dict": ppo.Agent(4, 2).state_dict()}, model_path)
    video_dir = tmp_path / "videos"
    video_dir.mkdir()
    os.symlink("/dev/full", video_dir / "eval-episode-0.partial.mp4")
    command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "1"]
    command += ["--capture-video", "--video-dir", str(video_dir) if given == "path" else ".", "--torch-threads", "1"]
    cwd = REPO if given == "path" else video_dir
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip() and "warn" not in line.lower()]
    assert result.returncode == 1 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(
        f"error: the disk is full (No space left on device: {video_dir / 'eval-episode-0.partial.mp4'}); {video_dir} "
        "holds the videos"
    ), lines
    assert lines[0].endswith(": free space there, or write elsewhere, and run again"), lines
    assert os.listdir(video_dir) == []  # trial 20: the cut, empty .partial.mp4 was left behind


def test_a_file_holding_nan_weights_is_one_line_for_evaluate_and_resume(jax_run, tmp_path):
    """Trial 24, B1: a checkpoint or model whose weights were NaN (damaged or edited: a run stops at its first
    non-finite loss and never saves one) played as a torch.multinomial traceback, or as "mean return nan" with exit
    0, and the JAX twin's resume called it the "last good checkpoint". Real files of two real runs, one weight NaN."""
    import flax.serialization
    import numpy as np

    with open(os.path.join(jax_run, "checkpoint.msgpack"), "rb") as f:
        state = flax.serialization.msgpack_restore(f.read())
    kernel = np.array(state["train_state"]["params"]["params"]["Dense_3"]["kernel"])  # a writable copy
    kernel[0, 0] = np.nan
    state["train_state"]["params"]["params"]["Dense_3"]["kernel"] = kernel
    jax_path = tmp_path / "jax" / "checkpoint.msgpack"
    jax_path.parent.mkdir()
    jax_path.write_bytes(flax.serialization.msgpack_serialize(state))
    nan_at = "'train_state.params.params.Dense_3.kernel'"
    result = evaluate_cli("--model-path", str(jax_path), "--episodes", "1")
    assert_one_error_line(result, [f"--model-path {str(jax_path)!r} holds NaN or inf in {nan_at}: damaged or edited"])
    result = run_script("ppo_continuous_action_envpool_xla_jax", "--resume", str(jax_path), "--total-timesteps", "2048")
    assert_one_error_line(result, [f"--resume {str(jax_path)!r} holds NaN or inf in {nan_at}: damaged or edited"])

    log_dir = tmp_path / "torch"
    assert run_script("ppo", "--total-timesteps", "512", "--num-envs", "2", "--log-dir", str(log_dir)).returncode == 0
    checkpoint_path = os.path.join(only_run_dir(log_dir), "checkpoint.pt")
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    checkpoint["model_state_dict"]["actor.4.bias"][:] = float("inf")
    torch.save(checkpoint, checkpoint_path)
    result = evaluate_cli("--model-path", checkpoint_path, "--episodes", "1")
    assert_one_error_line(result, ["holds NaN or inf in 'model_state_dict.actor.4.bias': damaged or edited"])
    result = run_script("ppo", "--resume", checkpoint_path, "--total-timesteps", "1024")
    assert_one_error_line(result, [f"--resume {checkpoint_path!r} holds NaN or inf in 'model_state_dict.actor.4.bias'"])
