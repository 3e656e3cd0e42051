"""cleanrl_utils.run: run folders (unique, namespaced ids, resumed runs, unwritable places), the
writer, the thread count, the progress line on and off a terminal, the divergence exit and the
checkpoint schedule."""

import io
import os
import pty
import select
import subprocess
import sys
import textwrap
import time
import tty
from types import SimpleNamespace

import pytest
from helpers import REPO, one_line_exit, read_scalars

import cleanrl_utils.run as run_module
from cleanrl_utils.run import (
    ProgressLine,
    check_writable_dir,
    checkpoint_due,
    exit_if_diverged,
    make_writer,
    run_folder,
    torch_all_finite,
    torch_threads,
)


def run_args(log_dir, env_id="CartPole-v1", **overrides):
    return SimpleNamespace(env_id=env_id, exp_name="ppo", seed=1, log_dir=str(log_dir), track=False, **overrides)


# ---- run folders ----


def test_launches_in_the_same_second_get_folders_of_their_own(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_module.time, "time", lambda: 1700000000.5)
    names = [run_folder(run_args(tmp_path))[0] for _ in range(3)]
    assert names == [
        "CartPole-v1__ppo__1__1700000000",
        "CartPole-v1__ppo__1__1700000000-2",
        "CartPole-v1__ppo__1__1700000000-3",
    ]
    assert sorted(os.listdir(tmp_path)) == sorted(names)
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"run folder: {tmp_path / name}" for name in names]  # absolute paths


def test_concurrent_processes_never_share_a_folder(tmp_path):
    code = textwrap.dedent(
        """
        import sys, time
        from types import SimpleNamespace
        import cleanrl_utils.run as run
        run.time.time = lambda: 1700000000.0  # every process in the same second
        args = SimpleNamespace(env_id="Pong-v5", exp_name="x", seed=1, log_dir=sys.argv[1])
        print(run.run_folder(args)[1])
        """
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=REPO)
        for _ in range(4)
    ]
    folders = [process.communicate(timeout=60)[0].splitlines()[-1] for process in processes]
    assert len(set(folders)) == 4 and all(os.path.isdir(folder) for folder in folders)


def test_a_namespaced_env_id_is_one_folder_level(tmp_path):
    run_name, run_dir = run_folder(run_args(tmp_path, env_id="phys2d/CartPole-v1"))
    assert run_name.startswith("phys2d-CartPole-v1__ppo__1__")
    assert os.listdir(tmp_path) == [run_name] and run_dir == str(tmp_path / run_name)


def test_a_resumed_run_continues_in_its_checkpoints_folder_from_anywhere(tmp_path, monkeypatch):
    run_dir = tmp_path / "A" / "runs" / "CartPole-v1__ppo__1__1700000000"
    run_dir.mkdir(parents=True)
    (tmp_path / "B").mkdir()
    monkeypatch.chdir(tmp_path / "B")
    relative = os.path.relpath(run_dir / "checkpoint.pt")
    run_name, resumed_dir = run_folder(run_args("runs"), relative)
    assert (run_name, resumed_dir) == (run_dir.name, str(run_dir))
    assert not (tmp_path / "B" / "runs").exists()  # nothing written where the command was started


@pytest.mark.parametrize("where", ["under a file", "/proc", "/sys"])
def test_a_log_dir_that_cannot_hold_folders_gives_one_line(tmp_path, where):
    (tmp_path / "a_file").write_text("")
    log_dir = {"under a file": str(tmp_path / "a_file" / "runs"), "/proc": "/proc/cleanrl-test/runs", "/sys": "/sys/cleanrl"}[
        where
    ]
    one_line_exit(lambda: run_folder(run_args(log_dir)), f"error: --log-dir {log_dir!r} cannot hold a run folder (")


def test_a_log_dir_that_is_a_link_to_a_missing_folder_is_named_as_such(tmp_path):
    """Trial 19 cosmetic: a dangling link as --log-dir was refused as "(FileExistsError: File exists)"."""
    os.symlink(tmp_path / "gone", tmp_path / "runs")
    for log_dir in (tmp_path / "runs", tmp_path / "runs" / "deeper"):
        one_line_exit(
            lambda: run_folder(run_args(log_dir)),
            f"error: --log-dir {str(log_dir)!r}: {tmp_path / 'runs'} is a link to {str(tmp_path / 'gone')!r}, which does "
            "not exist; make that folder, or give another --log-dir",
        )
    assert sorted(os.listdir(tmp_path)) == ["runs"]


def test_an_empty_log_dir_is_refused_not_read_as_the_current_folder(tmp_path, monkeypatch):
    """Trials 13 and 14: `--log-dir ''` put the run folder wherever the command was started. Now one line, and
    nothing written there: by run_folder, by check_writable_dir (the tools' folders), and by a real script."""
    from helpers import assert_one_error_line

    monkeypatch.chdir(tmp_path)
    for empty in ("", "  "):
        one_line_exit(lambda: run_folder(run_args(empty)), f"error: --log-dir {empty!r} is empty: name a folder")
        one_line_exit(lambda: check_writable_dir(empty, "--output-dir"), f"error: --output-dir {empty!r} is empty")
    command = [sys.executable, os.path.join(REPO, "cleanrl", "ppo.py"), "--log-dir", "", "--total-timesteps", "512"]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert_one_error_line(result, ["--log-dir '' is empty: name a folder (use . for the current one)"])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("script", ["ppo.py", "dqn_atari_envpool.py", "ppo_continuous_action_envpool_xla_jax.py"])
def test_an_empty_resume_is_refused_not_read_as_the_folder_above(tmp_path, script):
    """Trial 17, U2: `--resume ''` (an unset variable in `--resume "$CKPT"`) trained a fresh run into the parent of
    the current folder and overwrote the checkpoint.pt there: another run's, when started from inside a run folder.
    Now one line (check_run_args, which every script's validate_args calls), and nothing written anywhere."""
    from helpers import assert_one_error_line

    run_dir = tmp_path / "CartPole-v1__ppo__1__1700000000"
    (run_dir / "videos").mkdir(parents=True)
    (run_dir / "checkpoint.pt").write_bytes(b"another run's checkpoint")
    command = [sys.executable, os.path.join(REPO, "cleanrl", script), "--resume", "", "--total-timesteps", "512"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=run_dir / "videos", env=env)
    assert_one_error_line(result, ["--resume '' is empty: name a checkpoint file, or leave --resume out for a fresh run"])
    assert sorted(os.listdir(run_dir)) == ["checkpoint.pt", "videos"] and os.listdir(run_dir / "videos") == []
    assert (run_dir / "checkpoint.pt").read_bytes() == b"another run's checkpoint"


def test_check_writable_dir(tmp_path):
    check_writable_dir(str(tmp_path / "new" / "videos"), "--video-dir")  # made, and left clean
    assert os.listdir(tmp_path / "new" / "videos") == []
    check_writable_dir(str(tmp_path / "new" / "a" / "b"), "--video-dir", keep=False)  # checked, nothing made
    check_writable_dir(str(tmp_path / "new2" / "a"), "--video-dir", keep=False)
    assert os.listdir(tmp_path / "new") == ["videos"] and not (tmp_path / "new2").exists()
    (tmp_path / "a_file").write_text("")
    one_line_exit(
        lambda: check_writable_dir(str(tmp_path / "a_file" / "videos"), "--video-dir"),
        "--video-dir",
        "is not a writable folder (NotADirectoryError",
    )
    one_line_exit(lambda: check_writable_dir(str(tmp_path / "a_file"), "--video-dir"), "(FileExistsError")
    one_line_exit(lambda: check_writable_dir("/proc/self", "--log-dir"), "--log-dir '/proc/self' is not a writable folder")


def test_make_writer_writes_the_hyperparameters_and_a_resume_drops_later_events(tmp_path):
    from cleanrl_utils.plot import read_hyperparameters

    args = run_args(tmp_path, total_timesteps=1000, learning_rate=0.001)
    run_dir = str(tmp_path / "run")
    writer = make_writer(args, "run", run_dir)
    for step in range(1, 11):  # steps 6..10 came after the checkpoint at 5
        writer.add_scalar("charts/SPS", step, step)
    writer.close()
    writer = make_writer(args, "run", run_dir, resumed_step=5)
    for step in range(6, 9):
        writer.add_scalar("charts/SPS", 100 + step, step)
    writer.close()
    assert read_scalars(run_dir)["charts/SPS"] == [(s, float(s)) for s in range(1, 6)] + [(s, 100.0 + s) for s in range(6, 9)]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(run_dir, size_guidance={"tensors": 0})
    accumulator.Reload()
    table = read_hyperparameters(accumulator)
    assert table["env_id"] == "CartPole-v1" and table["seed"] == "1" and table["total_timesteps"] == "1000"


# ---- threads ----


def test_torch_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert torch_threads(5) == 5  # an explicit count wins
    assert torch_threads(0) == 3  # auto: OMP_NUM_THREADS, as cleanrl_utils.benchmark sets it per run
    for junk in ("", "0", "two", "-1"):
        monkeypatch.setenv("OMP_NUM_THREADS", junk)
        assert torch_threads(0) == len(os.sched_getaffinity(0))
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert torch_threads(0) == len(os.sched_getaffinity(0))


def test_torch_threads_follows_the_cores_this_process_may_use():
    code = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); from cleanrl_utils.run import torch_threads; print(torch_threads(0))"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert result.stdout.strip() == "1", result.stderr


# ---- progress line ----

LINE = "step {step}/1,000  SPS 50  return(last {n}) {mean}  games {games}  ETA {eta} min"

PROGRESS = """
from cleanrl_utils.run import ProgressLine

progress = ProgressLine(0, 1000, "games")  # on sys.stdout
for step in (100, 200):
    progress.last_print = 0.0  # as if a second had passed
    progress.show(step, 50, [1.0, 2.0])
progress.show(250, 50, [1.0, 2.0])  # within the same second: not shown
progress.end_line()
print("a line of its own", flush=True)
progress.end_line()  # nothing open: nothing printed
progress.show(1000, 50, [1.0, 2.0, 6.0], final=True)  # always shown, ends the line
"""


def test_progress_line_on_a_terminal_is_rewritten_in_place():
    master, slave = pty.openpty()
    tty.setraw(slave)  # no "\n" -> "\r\n": read back the bytes as written
    process = subprocess.Popen([sys.executable, "-c", PROGRESS], stdout=slave, stderr=subprocess.PIPE, cwd=REPO)
    os.close(slave)
    output, deadline = b"", time.time() + 60
    while time.time() < deadline:
        if not select.select([master], [], [], 1)[0]:
            if process.poll() is not None:
                break
            continue
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        output += data
    os.close(master)
    assert process.wait(timeout=30) == 0, process.stderr.read()
    clear = "\r\x1b[K"
    first = LINE.format(step=100, n=2, mean="1.50", games=2, eta="0.3")
    second = LINE.format(step=200, n=2, mean="1.50", games=2, eta="0.3")
    last = LINE.format(step="1,000", n=3, mean="3.00", games=3, eta="0.0")
    assert output.decode() == f"{clear}{first}{clear}{second}\na line of its own\n{clear}{last}\n"


def test_progress_line_off_a_terminal_prints_plain_lines():
    out = io.StringIO()  # a pipe, a log file, CI
    progress = ProgressLine(0, 1000, "episodes", stream=out)
    progress.show(100, 50, [])  # the first one is shown
    progress.show(200, 50, [1.0])  # within 10 s: not shown
    progress.end_line()  # nothing is left open off a terminal
    progress.show(1000, 50, [1.0], final=True)
    assert out.getvalue() == (
        "step 100/1,000  SPS 50  return(last 0) n/a  episodes 0  ETA 0.3 min\n"
        "step 1,000/1,000  SPS 50  return(last 1) 1.00  episodes 1  ETA 0.0 min\n"
    )
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_progress_sps_and_episodes_count_from_the_resumed_step():
    """A resumed run's returns start empty (the checkpoint keeps none): its line says the count is since the resume
    (trial 14: "episodes 0" at step 825 of a run that had logged 34)."""
    progress = ProgressLine(start_step=5000, total_steps=10000, stream=io.StringIO())
    progress.start_time = time.time() - 10
    assert progress.sps(6000) == pytest.approx(100, abs=2)
    progress.show(6000, 100, [2.0], final=True)
    assert "return(last 1) 2.00  episodes since resume 1  ETA" in progress.stream.getvalue()


# ---- divergence exit and checkpoint schedule ----


class Recorder:
    def __init__(self):
        self.calls = []

    def close(self):
        self.calls.append("close")

    def end_line(self):
        self.calls.append("end_line")


def test_exit_if_diverged_names_the_last_good_checkpoint(tmp_path):
    writer, progress = Recorder(), Recorder()
    checkpoint = tmp_path / "run" / "checkpoint.pt"
    where = dict(iteration=3, global_step=1536, checkpoint_path=str(checkpoint), writer=writer, progress=progress)
    exit_if_diverged(True, **where, resumed_from=None)  # finite: nothing happens
    assert writer.calls == [] and progress.calls == []
    start = "error: non-finite loss or parameters at iteration 3 (global step 1,536); "
    message = one_line_exit(lambda: exit_if_diverged(False, **where, resumed_from=None))
    assert message == start + "no checkpoint was written; try a lower --learning-rate"
    assert writer.calls == ["close"] and progress.calls == ["end_line"]  # events flushed, live line ended
    os.chdir(tmp_path)  # a relative --resume path is named absolute
    try:
        message = one_line_exit(lambda: exit_if_diverged(False, **where, resumed_from="old.pt"))
    finally:
        os.chdir(REPO)
    assert message == start + f"last good checkpoint: {tmp_path / 'old.pt'}; try a lower --learning-rate"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"")
    message = one_line_exit(lambda: exit_if_diverged(False, **where, resumed_from="old.pt"))
    assert message == start + f"last good checkpoint: {checkpoint}; try a lower --learning-rate"  # the run folder's first
    message = one_line_exit(lambda: exit_if_diverged(False, **where, resumed_from=None, flag="--q-lr"))
    assert message.endswith("; try a lower --q-lr")  # the flag the script names


def test_checkpoint_due():
    from cleanrl_utils.stop import LOOP_PROGRESS, trained_all_iterations

    due = lambda every, stopping=False: [i for i in range(1, 11) if checkpoint_due(i, 10, every, stopping)]  # noqa: E731
    try:
        assert [i for i in range(1, 10) if checkpoint_due(i, 10, 3, False)] == [3, 6, 9]
        assert LOOP_PROGRESS == [9, 10] and not trained_all_iterations()  # the last iteration is not reached yet
        assert due(0) == [10]  # only at the end
        assert trained_all_iterations()  # noted for the line of a run folder moved after it (trial 23, A2)
        assert due(3) == [3, 6, 9, 10]
        assert due(20) == [10]
        assert due(0, stopping=True) == list(range(1, 11))  # a requested stop saves whatever the iteration
    finally:
        LOOP_PROGRESS.clear()  # this process's runs are tests


def test_torch_all_finite():
    import torch

    model = torch.nn.Linear(3, 2)
    assert torch_all_finite(model) and torch_all_finite(model, torch.tensor(1.0))
    assert not torch_all_finite(model, torch.tensor(float("nan")))
    with torch.no_grad():
        model.bias[1] = float("inf")
    assert not torch_all_finite(model)


# ---- the run name and the resume folder: one line naming the flag at fault (issue 25, wording and traceback 2) ----


@pytest.mark.parametrize(
    "exp_name,fragment",
    [
        ("", "error: --exp-name '' is empty"),
        ("  ", "error: --exp-name '  ' is empty"),
        ("a/b", "error: --exp-name 'a/b' holds a '/'"),
        ("x" * 300, "error: --exp-name is 300 bytes long; a folder name allows at most 200"),
    ],
)
def test_a_bad_exp_name_is_blamed_not_the_log_dir(tmp_path, exp_name, fragment):
    # was: "" accepted (folder CartPole-v1____1__...), the others blamed --log-dir
    args = run_args(tmp_path / "runs")
    args.exp_name = exp_name
    one_line_exit(lambda: run_folder(args), fragment)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("run_dir", ["/proc/self", "/sys/kernel"])
def test_resuming_in_a_folder_that_cannot_be_written_gives_one_line(run_dir):
    checkpoint = os.path.join(run_dir, "checkpoint.pt")
    one_line_exit(
        lambda: run_folder(run_args("runs"), checkpoint),
        f"error: --resume {checkpoint!r} is in a folder this run cannot write to (",
        "copy the run folder somewhere writable",
    )


def test_a_real_resume_into_a_read_only_run_folder_gives_one_line(tmp_path):
    """The tests run as root, who writes through a folder's permission bits: root gets an immutable folder
    (chattr +i, EPERM for everyone), anyone else a chmod 555 one."""
    from helpers import assert_one_error_line, run_script

    first = run_script("ppo", "--total-timesteps", "512", "--log-dir", str(tmp_path), env={"OMP_NUM_THREADS": "1"})
    assert first.returncode == 0, first.stderr[-2000:]
    (run_dir,) = [os.path.join(tmp_path, name) for name in os.listdir(tmp_path)]
    before = sorted(os.listdir(run_dir))
    lock, unlock = (["chattr", "+i", run_dir], ["chattr", "-i", run_dir]) if os.getuid() == 0 else (None, None)
    if lock:
        subprocess.run(lock, check=True)
    else:
        os.chmod(run_dir, 0o555)
    checkpoint = os.path.join(run_dir, "checkpoint.pt")
    try:
        result = run_script("ppo", "--resume", checkpoint, "--total-timesteps", "1024", env={"OMP_NUM_THREADS": "1"})
    finally:
        subprocess.run(unlock, check=True) if unlock else os.chmod(run_dir, 0o755)
    assert_one_error_line(result, [f"--resume {checkpoint!r} is in a folder this run cannot write to (PermissionError"])
    assert sorted(os.listdir(run_dir)) == before  # was: a PermissionError traceback


# ---- resuming an older kept checkpoint (issue 25, lost work 3) ----


def test_resuming_an_older_kept_checkpoint_is_refused_with_how_to_branch(tmp_path):
    """Resuming writes into the checkpoint's folder from its step on. From checkpoint-000000100.pt of a run that went
    on to step 200 that would overwrite checkpoint.pt and the newer kept file: one line, nothing touched. The latest
    kept file (a hard link to checkpoint.pt, or a byte-equal copy where the file system has no hard links) and
    checkpoint.pt itself resume as before."""
    run_dir = tmp_path / "CartPole-v1__ppo__1__1700000000"
    run_dir.mkdir()
    (run_dir / "checkpoint-000000100.pt").write_bytes(b"step 100")
    (run_dir / "checkpoint-000000200.pt").write_bytes(b"step 200")
    os.link(run_dir / "checkpoint-000000200.pt", run_dir / "checkpoint.pt")
    before = {path.name: path.read_bytes() for path in run_dir.iterdir()}
    older = str(run_dir / "checkpoint-000000100.pt")
    branch = f"{run_dir}-from-100"
    one_line_exit(
        lambda: run_folder(run_args("runs"), older),
        # checkpoint.pt, a link to the newest kept file, is not another later checkpoint (trial 9: counted twice)
        f"error: --resume {older!r} is an older checkpoint of a run that went on (checkpoint-000000200.pt); resuming",
        f"To branch from it: mkdir {branch} && cp {older} {branch}/checkpoint.pt, then --resume {branch}/checkpoint.pt",
    )
    assert {path.name: path.read_bytes() for path in run_dir.iterdir()} == before
    for latest in ("checkpoint-000000200.pt", "checkpoint.pt"):
        assert run_folder(run_args("runs"), str(run_dir / latest))[1] == str(run_dir)
    (run_dir / "checkpoint.pt").unlink()  # the copy fallback: equal bytes, another file
    (run_dir / "checkpoint.pt").write_bytes(b"step 200")
    assert run_folder(run_args("runs"), str(run_dir / "checkpoint-000000200.pt"))[1] == str(run_dir)
    (run_dir / "checkpoint-000000200.pt").unlink()  # checkpoint.pt alone is newer than the kept file
    one_line_exit(lambda: run_folder(run_args("runs"), older), "went on (checkpoint.pt)")


def test_checkpoint_pt_rolled_back_to_an_older_kept_copy_is_refused_too(tmp_path):
    """Trial 13, Q6: copying checkpoint-000000100.pt over checkpoint.pt and resuming checkpoint.pt went through and
    overwrote the newer kept checkpoints. The step comes from the checkpoint (`saved_step`) where the caller has it,
    else from the kept file of equal bytes; a checkpoint.pt at or past the newest kept step resumes as before."""
    from cleanrl_utils.run import check_resumes_the_latest

    run_dir = tmp_path / "CartPole-v1__ppo__1__1700000000"
    run_dir.mkdir()
    for step in (100, 200, 300):
        (run_dir / f"checkpoint-{step:09d}.pt").write_bytes(f"step {step}".encode())
    (run_dir / "checkpoint.pt").write_bytes(b"step 100")  # rolled back by hand
    before = {path.name: path.read_bytes() for path in run_dir.iterdir()}
    latest = str(run_dir / "checkpoint.pt")
    one_line_exit(
        lambda: run_folder(run_args("runs"), latest),
        f"error: --resume {latest!r} holds step 100, older than the kept checkpoints of this run "
        "(checkpoint-000000200.pt, checkpoint-000000300.pt)",
        f"mkdir {run_dir}-from-100 && cp {latest} {run_dir}-from-100/checkpoint.pt",
    )
    assert {path.name: path.read_bytes() for path in run_dir.iterdir()} == before
    (run_dir / "checkpoint.pt").write_bytes(b"another state")  # bytes of no kept file: the recorded step decides
    one_line_exit(lambda: check_resumes_the_latest(str(run_dir), latest, saved_step=200), "holds step 200", "000300")
    check_resumes_the_latest(str(run_dir), latest, saved_step=300)  # the newest: resumes
    check_resumes_the_latest(str(run_dir), latest, saved_step=450)  # went on without keeping: resumes
    assert run_folder(run_args("runs"), latest)[1] == str(run_dir)  # no step at hand, no equal kept file: resumes


def test_the_branch_commands_paste_into_a_shell_under_any_folder_name(tmp_path):
    """Trial 19, W1: under a folder named 'k c' the printed `mkdir ... && cp ...` made a stray folder 'k' and failed.
    Pasted into bash as printed, the commands branch the run, and the --resume path they name is the copy."""
    run_dir = tmp_path / "k c $(touch pwned) it's" / "CartPole-v1__ppo__1__1700000000"
    run_dir.mkdir(parents=True)
    (run_dir / "checkpoint-000000100.pt").write_bytes(b"step 100")
    (run_dir / "checkpoint.pt").write_bytes(b"step 200")
    line = one_line_exit(lambda: run_folder(run_args("runs"), str(run_dir / "checkpoint-000000100.pt")), "To branch")
    commands, resume = line.split("To branch from it: ")[1].split(", then --resume ")
    pasted = subprocess.run(
        ["bash", "-c", f"{commands} && printf '%s' {resume}"], capture_output=True, text=True, cwd=tmp_path
    )
    assert pasted.returncode == 0, pasted.stderr
    assert open(pasted.stdout, "rb").read() == b"step 100" and pasted.stdout == f"{run_dir}-from-100/checkpoint.pt"
    assert sorted(os.listdir(run_dir.parent)) == [run_dir.name, f"{run_dir.name}-from-100"]
    assert not (tmp_path / "pwned").exists()


def test_an_older_checkpoint_of_a_long_run_names_how_many_went_on_not_each(tmp_path):
    """Trial 8, S1: a run that kept 140 checkpoints after the one resumed made a 5,000-character line."""
    run_dir = tmp_path / "CartPole-v1__ppo__1__1700000000"
    run_dir.mkdir()
    for step in range(100, 14_200, 100):
        (run_dir / f"checkpoint-{step:09d}.pt").write_bytes(f"step {step}".encode())
    (run_dir / "checkpoint.pt").write_bytes(b"step 14200")
    older = str(run_dir / "checkpoint-000000100.pt")
    line = one_line_exit(
        lambda: run_folder(run_args("runs"), older), "went on (141 later checkpoints, up to checkpoint-000014100.pt)"
    )
    assert len(line) < 1500 and "To branch from it: mkdir" in line  # 141 names would add 3,500 characters
    assert run_folder(run_args("runs"), str(run_dir / "checkpoint.msgpack"))[1] == str(run_dir)  # other format: its own


def test_script_cases_give_what_a_fresh_interpreter_gives(tmp_path):
    """tests/script_cases.py (the bad-input tests' batch runner) against the real thing, one interpreter per case: the
    same exit code, stdout, and stderr up to the traceback's frames for an uncaught exception; output written to file
    descriptor 2 directly (as C libraries do) is caught too."""
    import json

    script = tmp_path / "script.py"
    script.write_text(
        "import os, sys\n"
        "print('start', sys.argv[1:])\n"
        "if sys.argv[1] == 'exit-message':\n    sys.exit('error: a bad value')\n"
        "if sys.argv[1] == 'exit-code':\n    sys.exit(3)\n"
        "if sys.argv[1] == 'raise':\n    raise ValueError('boom')\n"
        "os.write(2, b'from C\\n')\n"
    )
    cases = [["exit-message"], ["exit-code"], ["raise"], ["fine", "--flag"]]
    runner = [sys.executable, os.path.join(REPO, "tests", "script_cases.py"), str(script), json.dumps(cases)]
    batched = json.loads(subprocess.run(runner, capture_output=True, text=True, timeout=60).stdout.splitlines()[-1])
    for case, outcome in zip(cases, batched):
        fresh = subprocess.run([sys.executable, str(script), *case], capture_output=True, text=True, timeout=60)
        assert (outcome["returncode"], outcome["stdout"]) == (fresh.returncode, fresh.stdout), case
        if case == ["raise"]:
            assert "Traceback" in outcome["stderr"] and outcome["stderr"].endswith("ValueError: boom\n")
        else:
            assert outcome["stderr"] == fresh.stderr, case


def test_track_without_a_wandb_login_is_one_line_and_leaves_no_run_folder(tmp_path):
    """Trial 15, S7: --track with no W&B login gave a 19-line UsageError traceback and left an empty run folder."""
    from helpers import assert_one_error_line

    (tmp_path / "home").mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("WANDB_")}
    env |= {"HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"}  # no ~/.netrc: no login
    command = [sys.executable, os.path.join(REPO, "cleanrl", "ppo.py"), "--total-timesteps", "256", "--num-envs", "2"]
    command += ["--num-steps", "64", "--track", "--log-dir", str(tmp_path / "runs")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    # no login fails at once: no "within 30 s" (trial 17)
    assert_one_error_line(result, ["--track could not start Weights and Biases (UsageError", "WANDB_MODE=offline"])
    assert not (tmp_path / "runs").exists()  # the run folder, and the --log-dir made for it


def test_track_with_a_key_but_no_answer_gives_up_in_one_line_and_leaves_nothing(tmp_path):
    """Trial 16, T3: a W&B key with no network answer retried until `timeout` killed the run at 120 s; wandb's own
    files went into the current folder. Now WANDB_INIT_TIMEOUT bounds the wait, and wandb writes into the run folder,
    which goes with it. (Where the network answers, the fake key is refused: the same one line.)"""
    for folder in ("home", "cwd"):
        (tmp_path / folder).mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("WANDB_")}
    env |= {"HOME": str(tmp_path / "home"), "WANDB_API_KEY": "a" * 40, "WANDB_INIT_TIMEOUT": "2", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, os.path.join(REPO, "cleanrl", "ppo.py"), "--total-timesteps", "256", "--num-envs", "2"]
    command += ["--num-steps", "64", "--track", "--log-dir", str(tmp_path / "runs")]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL, cwd=tmp_path / "cwd"
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]  # after wandb's own "wandb: ..." lines
    assert last.startswith("error: --track could not start Weights and Biases within 2 s ("), last
    assert not (tmp_path / "runs").exists() and os.listdir(tmp_path / "cwd") == []


HOLD_THE_FOLDER = """
import sys, time
from types import SimpleNamespace
from cleanrl_utils.run import run_folder

run_folder(SimpleNamespace(env_id="CartPole-v1", exp_name="ppo", seed=1, log_dir=sys.argv[1], track=False), sys.argv[2] or None)
print("holding", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("first", ["fresh", "resumed"])
def test_a_run_folder_is_written_by_one_process_at_a_time(tmp_path, first):
    """Trial 19, W4: two resumes of one checkpoint at once both ran, each overwriting the other's checkpoint, and
    every step was logged twice. A resume of a folder another process writes (a fresh run's or a resumed one's) is
    one line naming that process, nothing written; once it has ended, the resume goes ahead."""
    run_dir = tmp_path / "runs" / "CartPole-v1__ppo__1__1700000000"
    run_dir.mkdir(parents=True)
    (run_dir / "checkpoint.pt").write_bytes(b"step 100")
    held = str(run_dir / "checkpoint.pt") if first == "resumed" else ""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_FOLDER, str(run_dir.parent), held], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert holder.stdout.readline().startswith("run folder: ")
        assert holder.stdout.readline() == "holding\n"
        if first == "fresh":  # its folder is the one made beside the checkpoint's: resume that one's checkpoint
            (fresh,) = [path for path in (tmp_path / "runs").iterdir() if path != run_dir]
            (fresh / "checkpoint.pt").write_bytes(b"step 50")
            run_dir = fresh
        before = sorted(os.listdir(run_dir))
        one_line_exit(
            lambda: run_folder(run_args(tmp_path / "runs"), str(run_dir / "checkpoint.pt")),
            f"error: the run folder {run_dir} is being written by another process (pid {holder.pid}: ",
            # its whole command, to its last argument (trial 20: cut at 160 characters)
            f"{' '.join([str(run_dir.parent), held]).strip()}): wait for it to end, or branch from a copy of its "
            "checkpoint in a folder of its own",
        )
        assert sorted(os.listdir(run_dir)) == before
    finally:
        holder.kill()
        holder.wait()
    assert run_folder(run_args(tmp_path / "runs"), str(run_dir / "checkpoint.pt"))[1] == str(run_dir)
    assert run_folder(run_args(tmp_path / "runs"), str(run_dir / "checkpoint.pt"))[1] == str(run_dir)  # its own: again
