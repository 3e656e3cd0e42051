"""cleanrl_utils.benchmark (sweep runner), cleanrl_utils.plot (curves + summary) and the sweep
scripts in benchmark/, on real processes and real tensorboard event files."""

import glob
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import REPO, run_script_cases
from torch.utils.tensorboard import SummaryWriter

from cleanrl_utils.benchmark import Progress, plan_runs, run_all, threads_per_run
from cleanrl_utils.plot import load_runs, mean_and_band, moving_average, select_runs, summarise, summary_markdown
from cleanrl_utils.run import make_writer


def test_runner_respects_worker_limit_and_continues_past_failures(tmp_path):
    # each run appends its start and end to a shared file; seed 2 fails
    trace = tmp_path / "trace.txt"
    worker = tmp_path / "worker.py"
    worker.write_text(
        "import sys, time\n"
        "env, seed = sys.argv[sys.argv.index('--env-id') + 1], sys.argv[sys.argv.index('--seed') + 1]\n"
        f"open({str(trace)!r}, 'a').write(f'start {{env}} {{seed}}\\n')\n"
        "time.sleep(0.3)\n"
        f"open({str(trace)!r}, 'a').write(f'end {{env}} {{seed}}\\n')\n"
        "print('ran', env, seed)\n"
        "sys.exit(3 if seed == '2' else 0)\n"
    )
    runs = plan_runs(f"{sys.executable} {worker}", ["A-v0", "B-v0"], [1, 2], str(tmp_path / "logs"))
    out = io.StringIO()
    failed = run_all(runs, workers=2, poll_seconds=0.05, stream=out)
    assert sorted((r.env_id, r.seed) for r in failed) == [("A-v0", 2), ("B-v0", 2)]
    assert all(r.returncode == 3 for r in failed)
    events = trace.read_text().split("\n")[:-1]
    assert len(events) == 8  # all four ran to the end despite failures
    running = peak = 0
    for event in events:
        running += 1 if event.startswith("start") else -1
        peak = max(peak, running)
    assert peak == 2
    for run in runs:
        assert f"ran {run.env_id} {run.seed}" in open(run.log_path).read()
    text = out.getvalue()
    assert "FAILED A-v0 seed 2 (exit 3)" in text and "[4/4 done, 2 failed" in text
    # off a terminal a status line is printed only when the state changes, not at every poll
    states = [re.sub(r", \d+s\]", "]", line) for line in text.splitlines() if "done" in line]
    assert all(a != b for a, b in zip(states, states[1:])), states


def test_runs_are_named_after_the_script_or_exp_name(tmp_path):
    def names(command: str) -> list[str]:
        return [os.path.basename(run.log_path) for run in plan_runs(command, ["Pong-v5"], [1, 2], str(tmp_path))]

    assert names("python cleanrl/ppo.py --total-timesteps 10 --no-anneal-lr") == [
        "ppo__Pong-v5__1.log",
        "ppo__Pong-v5__2.log",
    ]
    assert names("python cleanrl/ppo.py --exp-name ppo_tuned --num-envs 64")[0] == "ppo_tuned__Pong-v5__1.log"
    assert names("true")[0] == "true__Pong-v5__1.log"


def test_progress_off_a_terminal_prints_only_state_changes():
    out = io.StringIO()
    progress = Progress(out)
    for seconds, done in [(1, 0), (2, 0), (3, 1), (4, 1), (5, 1)]:
        progress.update(f"[{done}/2 done, {seconds}s]", state=done)
    progress.close()
    assert out.getvalue() == "[0/2 done, 1s]\n[1/2 done, 3s]\n"


def test_runner_cli_exit_code_and_report(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cleanrl_utils.benchmark",
            "--command",
            f"{sys.executable} -c 'import sys; sys.exit(1)'",
            "--env-ids",
            "X-v0",
            "--seeds",
            "7",
            "--log-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "1 of 1 runs failed" in result.stdout and "X-v0 seed 7: exit 1" in result.stdout
    result = subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.benchmark", "--command", "true", "--workers", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "--workers must be a positive integer, got 0" in result.stderr


def write_run(log_dir, env_id, exp_name, seed, returns, steps, sps):
    writer = SummaryWriter(str(log_dir / f"{env_id}__{exp_name}__{seed}__1700000000"))
    for value, step in zip(returns, steps):
        writer.add_scalar("charts/episodic_return", value, step)
    writer.add_scalar("charts/SPS", sps, steps[-1])
    writer.close()


def test_moving_average_and_band():
    np.testing.assert_allclose(moving_average(np.array([1.0, 3.0, 5.0, 7.0]), 2), [1.0, 2.0, 4.0, 6.0])
    grid = np.array([0.0, 1.0, 2.0])
    mean, half, count = mean_and_band(
        [np.array([0.0, 2.0]), np.array([0.0, 2.0])], [np.array([0.0, 2.0]), np.array([2.0, 4.0])], grid
    )
    np.testing.assert_allclose(mean, [1.0, 2.0, 3.0])
    # two seeds 2 apart: std = sqrt(2), t(0.975, 1) = 12.706
    np.testing.assert_allclose(half, 12.7062047 * np.sqrt(2) / np.sqrt(2) * np.ones(3), rtol=1e-6)
    assert (count == 2).all()


def test_the_t_quantile_matches_scipy_for_every_number_of_seeds():
    """plot computes Student's t itself (scipy's OpenBLAS spun forever under a tight memory limit): the table and the
    expansion past 30 degrees of freedom agree with scipy, and plot does not load scipy."""
    from scipy import stats

    from cleanrl_utils.plot import student_t_975

    dof = np.arange(1, 2001)
    np.testing.assert_allclose(student_t_975(dof), stats.t.ppf(0.975, dof), rtol=1e-6)
    code = "import sys, cleanrl_utils.plot as p, numpy as np; p.mean_and_band([np.arange(3.0)] * 3, [np.arange(3.0)] * 3, np.arange(3.0)); print(any(m.startswith('scipy') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO).stdout == "False\n"


def test_plot_writes_pngs_and_summary(tmp_path):
    log_dir = tmp_path / "runs"
    steps = np.arange(1, 101) * 1000
    for seed, offset in [(1, 0.0), (2, 2.0), (3, 4.0)]:
        write_run(log_dir, "Pong-v5", "ppo_atari_envpool", seed, np.linspace(-21, 0, 100) + offset, steps, 600 + seed)
    write_run(log_dir, "Breakout-v5", "ppo_atari_envpool", 1, np.full(50, 10.0), steps[:50], 500)
    (log_dir / "not_a_run").mkdir()

    runs = load_runs(str(log_dir), "charts/episodic_return")
    assert sorted((r.env_id, r.seed) for r in runs) == [("Breakout-v5", 1), ("Pong-v5", 1), ("Pong-v5", 2), ("Pong-v5", 3)]
    rows = {row["env"]: row for row in summarise(runs, window=20)}
    last_tenth = np.linspace(-21, 0, 100)[-10:].mean()
    assert rows["Pong-v5"]["final_mean"] == pytest.approx(last_tenth + 2.0, abs=1e-4)
    assert rows["Pong-v5"]["final_std"] == pytest.approx(np.std([0.0, 2.0, 4.0]), abs=1e-4)
    assert rows["Pong-v5"]["sps"] == pytest.approx(602.0)
    assert rows["Pong-v5"]["steps"] == 100_000 and rows["Pong-v5"]["seeds"] == 3
    assert rows["Breakout-v5"]["final_mean"] == pytest.approx(10.0) and rows["Breakout-v5"]["best"] == pytest.approx(10.0)
    # trial 13: "steps" was the last finished episode's step; a run whose last episode ended at 95,000 ran 100,000
    writer = SummaryWriter(str(tmp_path / "one" / "Hopper-v4__sac__1__1700000000"))
    for step in steps[:95]:
        writer.add_scalar("charts/episodic_return", 1.0, step)
    writer.add_scalar("charts/SPS", 100.0, 100_000)
    writer.close()
    (hopper,) = summarise(load_runs(str(tmp_path / "one"), "charts/episodic_return"), window=20)
    assert hopper["steps"] == 100_000

    out_dir = tmp_path / "plots"
    result = run_plot(log_dir, str(out_dir))
    assert result.returncode == 0, result.stderr
    import matplotlib.image

    for env_id in ("Pong-v5", "Breakout-v5"):
        image = matplotlib.image.imread(out_dir / f"{env_id}.png")
        assert image.shape[0] > 300 and image.shape[1] > 800
        assert image[..., :3].std() > 0.05  # not blank
    summary = (out_dir / "summary.md").read_text()
    assert "| ppo_atari_envpool | Pong-v5 | 3 | 100,000 |" in summary


def test_plot_cli_errors(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.plot", "--log-dir", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "is not a folder" in result.stderr and "Traceback" not in result.stderr
    result = subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.plot", "--log-dir", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0 and "no run under" in result.stderr


@pytest.mark.parametrize(
    "flags, line",
    [
        (["--grid-points", "1000000000"], "error: --grid-points must be in [2, 100,000], got 1000000000"),
        (["--grid-points", "1"], "error: --grid-points must be in [2, 100,000], got 1"),
        (["--smoothing-window", "0"], "error: --smoothing-window must be in [1, 1,000,000,000] episodes, got 0"),
        (  # trial 18, V2: an OverflowError traceback from numpy
            ["--smoothing-window", "9223372036854775808"],
            "error: --smoothing-window must be in [1, 1,000,000,000] episodes, got 9223372036854775808",
        ),
    ],
)
def test_plot_refuses_a_grid_or_window_it_cannot_draw_in_one_line(tmp_path, flags, line):
    """Trial 17, U3: `--grid-points 1000000000` was taken; the curves on that grid grew to 26 GB and the kernel killed
    the tool, no line, an empty output folder left. Each bound is one line, before anything is read or written."""
    write_run(tmp_path / "runs", "CartPole-v1", "ppo", 1, np.arange(5.0), np.arange(1, 6) * 100, 100)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "cleanrl_utils.plot", "--log-dir", str(tmp_path / "runs"), "--output-dir", str(out)]
    result = subprocess.run([*command, *flags], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 1 and result.stderr.strip() == line and not out.exists(), result.stderr


# ---- benchmark: runs that cannot start, empty commands, threads per run (issue 16, defects 15 and 7) ----


def benchmark_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.benchmark", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, **(env or {})} if env is not None else None,
    )


def test_a_missing_program_is_a_failed_run_and_the_sweep_goes_on(tmp_path):
    runs = plan_runs("nonexistent_program_xyz --flag", ["A-v0", "B-v0"], [1, 2], str(tmp_path / "logs"))
    out = io.StringIO()
    failed = run_all(runs, workers=2, poll_seconds=0.01, stream=out)  # was: FileNotFoundError, sweep aborted
    assert len(failed) == 4 and all(run.returncode == 127 for run in failed)
    for run in runs:
        assert "cannot start 'nonexistent_program_xyz': FileNotFoundError" in open(run.log_path).read()
    assert "FAILED B-v0 seed 2 (could not start 'nonexistent_program_xyz')" in out.getvalue()
    not_executable = tmp_path / "not_executable.sh"
    not_executable.write_text("echo hi\n")
    failed = run_all(plan_runs(str(not_executable), ["A-v0"], [1], str(tmp_path / "logs")), 1, 0.01, io.StringIO())
    assert "PermissionError" in open(failed[0].log_path).read()


@pytest.mark.parametrize(
    "program, why",
    [
        ("nonexistent_program_xyz", "no such program on PATH"),
        ("{tmp}/missing", "no such file"),
        ("{tmp}/plain.sh", "not an executable file"),
    ],
)
def test_a_program_that_cannot_start_is_one_line_before_any_run(tmp_path, program, why):
    """Trial 29, cosmetic 203: a mistyped program was found out only run by run ("2 of 2 runs failed", exit 127 in
    each log); a program that vanishes during the sweep is still a failed run (above)."""
    (tmp_path / "plain.sh").write_text("echo hi\n")
    program = program.format(tmp=tmp_path)
    log_dir = tmp_path / "logs"
    result = benchmark_cli(
        *["--command", f"{program} --flag", "--env-ids", "A-v0", "--seeds", "1", "2", "--log-dir", str(log_dir)]
    )
    assert result.returncode == 1 and not result.stdout, result.stdout
    assert result.stderr == f"error: --command's program {program!r} cannot be started ({why})\n"
    assert not log_dir.exists()


@pytest.mark.parametrize(
    "command,expected",
    [
        ("", 'error: --command is empty; give the program to run, e.g. --command ".venv/bin/python cleanrl/ppo.py"'),
        ("   ", 'error: --command is empty; give the program to run, e.g. --command ".venv/bin/python cleanrl/ppo.py"'),
        ("python -c 'x", 'error: --command "python -c \'x" cannot be parsed (No closing quotation)'),
        # trial 14: each run appends its own --seed and --env-id, so these were dropped without a word
        (
            "python cleanrl/ppo.py --seed 3",
            "error: --command holds --seed, which each run sets itself: give it as --seeds instead",
        ),
        (
            "python ppo.py --env-id=Acrobot-v1",
            "error: --command holds --env-id, which each run sets itself: give it as --env-ids instead",
        ),
    ],
)
def test_an_empty_or_unparsable_command_gives_one_line(command, expected):
    result = benchmark_cli("--command", command)
    assert result.returncode == 1 and result.stderr.strip() == expected  # was: IndexError


@pytest.mark.parametrize(
    "args, expected",
    [  # trial 15: each run failed on its own and the sweep exited 1 after starting them all
        (["--command", f"{sys.executable} cleanrl/nosuch.py"], "error: --command's script 'cleanrl/nosuch.py' does not exist"),
        (["--env-ids", "", "--command", f"{sys.executable} cleanrl/ppo.py"], "error: --env-ids holds an empty id ('')"),
        # trial 16: a negative seed started every run, each failing on its own
        (["--command", f"{sys.executable} cleanrl/ppo.py", "--seeds", "-3"], "error: --seeds must be in 0..2,147,483,647"),
    ],
)
def test_a_missing_script_or_an_empty_env_id_is_one_line_before_any_run(tmp_path, args, expected):
    seeds = [] if "--seeds" in args else ["--seeds", "1"]
    result = benchmark_cli(*args, *seeds, "--log-dir", str(tmp_path / "logs"))
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and result.stderr.startswith(expected), result.stderr
    assert not (tmp_path / "logs").exists()


def test_an_interpreter_that_cannot_import_the_project_gives_one_line_before_any_run(tmp_path):
    """Trial 3, D13: `--command "python cleanrl/ppo.py ..."` outside the activated environment failed every run with
    ModuleNotFoundError, each in its own log ("4 of 4 runs failed")."""
    other_python = tmp_path / "python3"
    other_python.write_text("#!/bin/sh\nexit 1\n")  # as a Python without this project installed answers the check
    other_python.chmod(0o755)
    log_dir = tmp_path / "logs"
    command = f"{other_python} cleanrl/ppo.py --total-timesteps 512"
    result = benchmark_cli("--command", command, "--env-ids", "CartPole-v1", "--seeds", "1", "--log-dir", str(log_dir))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: --command's interpreter '{other_python}' cannot import cleanrl_utils"), line
    assert not log_dir.exists()  # no run was started
    result = benchmark_cli("--command", f"{tmp_path / 'python-missing'} x.py", "--env-ids", "CartPole-v1", "--seeds", "1")
    assert result.returncode == 1 and "cannot be started" in result.stderr.strip()
    # A Python that finds the project only from the repository folder (as `python -c` does, with the current folder
    # on its path) would still fail the runs, whose scripts see cleanrl/ instead: the check runs from elsewhere.
    from_the_repo_only = tmp_path / "python3.11"
    from_the_repo_only.write_text(f'#!/bin/sh\n[ "$(pwd -P)" = "{os.path.realpath(REPO)}" ]\n')
    from_the_repo_only.chmod(0o755)
    result = benchmark_cli("--command", f"{from_the_repo_only} cleanrl/ppo.py", "--env-ids", "CartPole-v1", "--seeds", "1")
    assert result.returncode == 1 and "cannot import cleanrl_utils" in result.stderr, result.stderr


def test_an_unwritable_log_dir_gives_one_line(tmp_path):
    (tmp_path / "a_file").write_text("")
    result = benchmark_cli("--command", "true", "--log-dir", str(tmp_path / "a_file" / "logs"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("error: --log-dir") and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "env_ids,seeds,expected",
    [
        (["CartPole-v1"], ["1", "1"], "error: --seeds lists 1 twice; each env id and seed runs once"),
        (["A-v0", "B-v0", "A-v0", "A-v0"], ["1"], "error: --env-ids lists A-v0 3 times; each env id and seed runs once"),
    ],
)
def test_a_repeated_env_id_or_seed_gives_one_line_before_anything_runs(tmp_path, env_ids, seeds, expected):
    """Trial 9, T7: `--seeds 1 1 --workers 2` trained the same run twice at once, both appending to one log."""
    log_dir = tmp_path / "logs"
    result = benchmark_cli(
        *["--command", f"{sys.executable} -c 'print(1)'", "--env-ids", *env_ids, "--seeds", *seeds, "--workers", "2"],
        *["--log-dir", str(log_dir)],
    )
    assert result.returncode == 1 and result.stderr == expected + "\n" and not result.stdout, result.stderr
    assert not log_dir.exists()  # nothing ran


def test_threads_per_run():
    cores = len(os.sched_getaffinity(0))
    assert threads_per_run(1, 6, {}) == (str(cores), f"{cores} cores / 1 concurrent run")
    assert threads_per_run(2, 6, {})[0] == str(max(1, cores // 2))
    assert threads_per_run(4, 2, {})[0] == str(max(1, cores // 2))  # 2 runs never run 4 at once
    assert threads_per_run(cores * 3, cores * 3, {})[0] == "1"  # at least one
    assert threads_per_run(2, 6, {"OMP_NUM_THREADS": "3"}) == ("3", "as set in your environment")


PRINT_ENV = f'{sys.executable} -c \'import os; print("OMP_NUM_THREADS=" + os.environ.get("OMP_NUM_THREADS", "unset"))\''


def test_each_run_gets_its_share_of_the_cores(tmp_path):
    cores = len(os.sched_getaffinity(0))
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    result = subprocess.run(  # not benchmark_cli, which adds this process's environment back (OMP_NUM_THREADS included)
        [sys.executable, "-m", "cleanrl_utils.benchmark", "--command", PRINT_ENV, "--env-ids", "A-v0", "--seeds", "1", "2"]
        + ["--workers", "2", "--log-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    share = max(1, cores // 2)
    assert result.stdout.count("each run gets OMP_NUM_THREADS") == 1  # said once
    assert f"each run gets OMP_NUM_THREADS={share} ({cores} cores / 2 concurrent runs)" in result.stdout
    logs = sorted(glob.glob(str(tmp_path / "*.log")))
    last_line = lambda log: open(log).read().strip().splitlines()[-1]  # noqa: E731 (past the sweep's header line)
    assert len(logs) == 2 and all(last_line(log) == f"OMP_NUM_THREADS={share}" for log in logs)
    # the user's own setting is kept
    result = benchmark_cli(
        *["--command", PRINT_ENV, "--env-ids", "A-v0", "--seeds", "1", "--workers", "2", "--log-dir", str(tmp_path)],
        env={**env, "OMP_NUM_THREADS": "5"},
    )
    assert "each run gets OMP_NUM_THREADS=5 (as set in your environment)" in result.stdout
    assert last_line(logs[0]) == "OMP_NUM_THREADS=5"


# ---- plot: seeds from the runs' own hyperparameters, finished runs only (issue 16, defects 6 and 16) ----


def run_plot(log_dir, out_dir, *flags: str) -> subprocess.CompletedProcess:
    """`python -m cleanrl_utils.plot` over `log_dir` into `out_dir`, as a user runs it."""
    command = [sys.executable, "-m", "cleanrl_utils.plot", "--log-dir", str(log_dir), "--output-dir", str(out_dir), *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def write_script_run(log_dir, env_id, seed, returns, last_step, total, wall_start, exp_name="ppo", batch_size=100):
    """A run as a script writes it: run folder, hyperparameters table (make_writer), episodic
    returns, and charts/SPS once per iteration up to `last_step` (short of `total`: interrupted)."""
    from cleanrl_utils.run import run_folder

    args = SimpleNamespace(
        exp_name=exp_name, seed=seed, env_id=env_id, log_dir=str(log_dir), track=False, total_timesteps=total
    )
    args.batch_size, args.num_iterations = batch_size, total // batch_size
    args.num_envs, args.num_steps = 4, batch_size // 4
    run_name, run_dir = run_folder(args)
    writer = make_writer(args, run_name, run_dir)
    steps = np.linspace(batch_size, last_step, len(returns)).astype(int)
    for i, (value, step) in enumerate(zip(returns, steps)):
        writer.add_scalar("charts/episodic_return", value, step, walltime=wall_start + i)
    for step in range(batch_size, last_step + 1, batch_size):
        writer.add_scalar("charts/SPS", 1000, step, walltime=wall_start + step / 1000)
    writer.close()
    return run_name


def test_of_two_runs_of_a_seed_the_one_written_last_is_kept():
    """Trial 19 cosmetic: of a run started first, then resumed and extended to 19,968 steps, and a 512-step run started
    in between, plot kept the 512-step one, the later to start. The one written last is kept."""
    from cleanrl_utils.plot import RunData

    def run(name, start, end, steps):
        values = np.zeros(3)
        return RunData("CartPole-v1", "ppo", 1, steps=values, wall=values, values=values, sps=1.0, name=name,
                       start_time=start, end_time=end, last_step=steps, expected_steps=steps)  # fmt: skip

    extended, short = run("extended", start=100.0, end=900.0, steps=19_968), run("short", start=200.0, end=300.0, steps=512)
    kept, notes = select_runs([extended, short])
    assert [r.name for r in kept] == ["extended"]
    assert notes == ["ppo, CartPole-v1, seed 1: 2 runs; kept the finished one written last, extended; dropped short"]


def test_plot_takes_one_runs_own_folder_as_that_run(tmp_path):
    """Trial 10, D2: --log-dir pointing at one run's folder said that no run there logged episodes."""
    log_dir = tmp_path / "runs"
    steps = np.arange(1, 51) * 1000
    write_run(log_dir, "Pong-v5", "ppo_atari_envpool", 1, np.linspace(-21, -10, 50), steps, 600)
    write_run(log_dir, "Pong-v5", "ppo_atari_envpool", 2, np.linspace(-21, 0, 50), steps, 600)
    run_dir = log_dir / "Pong-v5__ppo_atari_envpool__2__1700000000"
    (run,) = load_runs(str(run_dir), "charts/episodic_return")
    assert (run.env_id, run.seed) == ("Pong-v5", 2)
    out_dir = tmp_path / "plots"
    command = [sys.executable, "-m", "cleanrl_utils.plot", "--log-dir", str(run_dir), "--output-dir", str(out_dir)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "| ppo_atari_envpool | Pong-v5 | 1 | 50,000 |" in (out_dir / "summary.md").read_text()  # one seed: that run


def test_plot_counts_seeds_not_folders_and_leaves_out_unfinished_runs(tmp_path, capsys):
    log_dir = tmp_path / "runs"
    total = 10_000
    older = {seed: write_script_run(log_dir, "CartPole-v1", seed, np.full(50, 100.0), total, total, 1000) for seed in (1, 2)}
    newer = {
        seed: write_script_run(log_dir, "CartPole-v1", seed, np.full(50, 400.0 + seed), total, total, 2000) for seed in (1, 2)
    }
    interrupted = write_script_run(log_dir, "CartPole-v1", 3, np.full(20, 50.0), 4000, total, 3000)
    diverged = write_script_run(log_dir, "CartPole-v1", 4, np.full(3, 10.0), 300, total, 3000)
    runs = load_runs(str(log_dir), "charts/episodic_return")
    assert len(runs) == 6  # six folders ...
    kept, notes = select_runs(runs)
    assert sorted((run.seed, run.name) for run in kept) == [(1, newer[1]), (2, newer[2])]  # ... two seeds
    assert f"left out {interrupted} (ppo, CartPole-v1, seed 3): did not finish (last step 4,000 of 10,000)" in notes
    assert f"left out {diverged} (ppo, CartPole-v1, seed 4): did not finish (last step 300 of 10,000)" in notes
    assert f"ppo, CartPole-v1, seed 1: 2 runs; kept the finished one written last, {newer[1]}; dropped {older[1]}" in notes
    (row,) = summarise(kept, window=20)
    assert row["seeds"] == 2 and row["steps"] == total and row["final_mean"] == pytest.approx(401.5)

    out_dir = tmp_path / "plots"
    result = run_plot(log_dir, str(out_dir))
    assert result.returncode == 0, result.stderr
    summary = (out_dir / "summary.md").read_text()
    assert "| ppo | CartPole-v1 | 2 | 10,000 | 401.50 +- 0.50 |" in summary  # was: seeds 6, curves cut at 300
    for note in notes:
        assert f"- {note}" in summary and note in result.stdout
    # --include-unfinished plots them too, flagged
    result = run_plot(log_dir, str(out_dir), "--include-unfinished")
    assert result.returncode == 0, result.stderr
    summary = (out_dir / "summary.md").read_text()
    assert "| ppo | CartPole-v1 | 4 (2 unfinished) | 10,000 |" in summary
    assert f"included unfinished {diverged} (ppo, CartPole-v1, seed 4): last step 300 of 10,000" in summary


def test_a_resumed_run_that_extended_its_length_counts_as_finished(tmp_path):
    args = SimpleNamespace(env_id="CartPole-v1", exp_name="ppo", seed=1, track=False, total_timesteps=1000)
    args.batch_size, args.num_iterations = 100, 10
    run_dir = str(tmp_path / "CartPole-v1__ppo__1__1700000000")
    writer = make_writer(args, "run", run_dir)
    for step in range(100, 600, 100):  # interrupted at 500 of 1,000
        writer.add_scalar("charts/episodic_return", 1.0, step)
    writer.close()
    args.total_timesteps, args.num_iterations = 2000, 20  # --resume --total-timesteps 2000
    writer = make_writer(args, "run", run_dir, resumed_step=500)
    for step in range(600, 2100, 100):
        writer.add_scalar("charts/episodic_return", 2.0, step)
    writer.close()
    (run,) = load_runs(str(tmp_path), "charts/episodic_return")
    assert (run.expected_steps, run.last_step, run.finished) == (2000, 2000, True)


def test_of_two_unfinished_runs_of_a_seed_the_note_does_not_call_the_kept_one_finished():
    """Trial 21 cosmetic: with --include-unfinished and neither run finished, the note said "kept the finished one"."""
    from cleanrl_utils.plot import RunData

    def run(name, end):
        values = np.zeros(3)
        return RunData("CartPole-v1", "ppo", 1, steps=values, wall=values, values=values, sps=1.0, name=name,
                       end_time=end, last_step=100, expected_steps=1000)  # fmt: skip

    kept, notes = select_runs([run("a", 10.0), run("b", 20.0)], include_unfinished=True)
    assert [r.name for r in kept] == ["b"]
    assert "ppo, CartPole-v1, seed 1: 2 runs; kept the one (none finished) written last, b; dropped a" in notes


def test_plot_keeps_two_scripts_under_one_exp_name_apart(tmp_path, monkeypatch):
    """Trial 20 cosmetic: a dqn.py run and a ppo.py run under one --exp-name were one curve, their seeds averaged (and
    of their two seed-1 runs one was dropped). Each run records its script file: the curves are kept apart."""
    log_dir = tmp_path / "runs"
    for script, seeds, value in (("ppo.py", (1, 2), 300.0), ("dqn.py", (1,), 100.0)):
        monkeypatch.setattr(sys, "argv", [os.path.join(REPO, "cleanrl", script)])
        for seed in seeds:
            write_script_run(log_dir, "CartPole-v1", seed, np.full(30, value), 1000, 1000, 1000, exp_name="mine")
    out_dir = tmp_path / "plots"
    result = run_plot(log_dir, str(out_dir))
    assert result.returncode == 0, result.stderr
    summary = (out_dir / "summary.md").read_text()
    assert "| mine (dqn.py) | CartPole-v1 | 1 | 1,000 | 100.00 +- 0.00 |" in summary
    assert "| mine (ppo.py) | CartPole-v1 | 2 | 1,000 | 300.00 +- 0.00 |" in summary
    assert "--exp-name mine was run by 2 scripts (dqn.py, ppo.py): plotted apart" in result.stdout
    assert "dropped" not in summary


def test_plot_groups_a_namespaced_env_id_by_its_real_id(tmp_path):
    log_dir = tmp_path / "runs"
    for seed in (1, 2):
        write_script_run(log_dir, "phys2d/CartPole-v1", seed, np.full(30, 200.0), 1000, 1000, 1000)
    write_script_run(log_dir, "CartPole-v1", 1, np.full(30, 500.0), 1000, 1000, 1000)
    assert all("/" not in name for name in os.listdir(log_dir))  # one folder level each
    out_dir = tmp_path / "plots"
    result = run_plot(log_dir, str(out_dir))
    assert result.returncode == 0, result.stderr  # was: "no run under ..."
    summary = (out_dir / "summary.md").read_text()
    assert "| ppo | phys2d/CartPole-v1 | 2 | 1,000 | 200.00 +- 0.00 |" in summary
    assert "| ppo | CartPole-v1 | 1 | 1,000 | 500.00 +- 0.00 |" in summary
    assert sorted(os.listdir(out_dir)) == ["CartPole-v1.png", "phys2d-CartPole-v1.png", "summary.md"]


def test_plot_with_only_unfinished_runs_says_so_in_one_line(tmp_path):
    log_dir = tmp_path / "runs"
    name = write_script_run(log_dir, "CartPole-v1", 1, np.full(5, 1.0), 500, 10_000, 1000)
    result = run_plot(log_dir, str(tmp_path / "plots"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (
        result.stderr.strip()
        == f"error: no run under {str(log_dir)!r} finished (--include-unfinished plots unfinished ones too)"
    )
    assert f"left out {name}" in result.stdout


def test_nan_or_inf_returns_are_left_out_by_name_not_averaged_in(tmp_path):
    """Trial 24, B2: a run that logged NaN or inf returns gave numpy RuntimeWarnings and a summary row of
    "inf +- nan", exit 0, with nothing naming the run. Its non-finite values are now left out and named."""
    log_dir = tmp_path / "runs"
    one = write_script_run(log_dir, "CartPole-v1", 1, np.array([1.0, np.nan, 3.0, np.inf, -np.inf, 5.0]), 1000, 1000, 10)
    write_script_run(log_dir, "CartPole-v1", 2, np.array([2.0, 4.0, 6.0]), 1000, 1000, 20)
    every = write_script_run(log_dir, "CartPole-v1", 3, np.array([np.nan, np.inf]), 1000, 1000, 30)
    result = run_plot(log_dir, str(tmp_path / "plots"), "--smoothing-window", "1")
    assert result.returncode == 0 and result.stderr == "", result.stderr  # no RuntimeWarning
    assert f"{one}: left out its 3 NaN or inf 'charts/episodic_return' values (step 280 and 2 more)" in result.stdout
    assert f"left out {every}: every 'charts/episodic_return' value it logged is NaN or inf (step 100 and 1 more)" in (
        result.stdout
    )
    summary = (tmp_path / "plots" / "summary.md").read_text()
    row = next(line for line in summary.splitlines() if line.startswith("| ppo"))
    assert row == "| ppo | CartPole-v1 | 2 | 1,000 | 5.50 +- 0.50 | 5.50 | 1,000 |"  # seeds 1 (last finite 5) and 2
    # trial 25, B3: that run alone: the one line names it and its values, not "no run logged" the tag
    only = tmp_path / "only"
    only.mkdir()
    (log_dir / every).rename(only / every)
    result = run_plot(only, str(tmp_path / "plots_only"), "--include-unfinished")
    assert result.returncode == 1 and result.stderr == (
        f"error: no run under {str(only)!r} logged 'charts/episodic_return' to plot (left out {every}: every "
        "'charts/episodic_return' value it logged is NaN or inf (step 100 and 1 more))\n"
    ), result.stderr
    assert not (tmp_path / "plots_only").exists()


def test_a_tag_no_run_logged_is_a_short_line_that_names_the_tags_they_logged(tmp_path):
    """Trial 28, cosmetic: a mistyped --tag over 29 runs was a 5,000-character line, a "left out" note per run."""
    log_dir = tmp_path / "runs"
    names = [write_script_run(log_dir, "CartPole-v1", seed, np.array([1.0, 2.0]), 1000, 1000, 10) for seed in range(1, 6)]
    result = run_plot(log_dir, str(tmp_path / "plots"), "--tag", "charts/episodic_retrun")
    first = "; ".join(
        f"left out {name}: it logged no 'charts/episodic_retrun' (its script does not log it, or not yet)"
        for name in sorted(names)[:3]
    )
    assert result.returncode == 1 and result.stderr == (
        f"error: no run under {str(log_dir)!r} logged 'charts/episodic_retrun' to plot ({first}; and 2 more like these; "
        "the tags they logged: charts/SPS, charts/episodic_return)\n"
    ), result.stderr


def test_the_steps_column_counts_no_dropped_non_finite_return(tmp_path):
    """Trial 25, K13: a run with inf returns appended past its end (an edited events file) showed the step of the
    last dropped value in the summary's steps column (1,929 for a run of 1,536 steps)."""
    from torch.utils.tensorboard import SummaryWriter

    log_dir = tmp_path / "runs"
    name = write_script_run(log_dir, "CartPole-v1", 1, np.array([1.0, 2.0, 3.0]), 1000, 1000, 10)
    writer = SummaryWriter(str(log_dir / name))
    for step in (1500, 1929):
        writer.add_scalar("charts/episodic_return", float("inf"), step, walltime=100 + step)
    writer.close()
    result = run_plot(log_dir, str(tmp_path / "plots"), "--smoothing-window", "1")
    assert result.returncode == 0, result.stderr
    assert f"{name}: left out its 2 NaN or inf 'charts/episodic_return' values (step 1,500 and 1 more)" in result.stdout
    row = next(line for line in (tmp_path / "plots" / "summary.md").read_text().splitlines() if line.startswith("| ppo"))
    assert row.startswith("| ppo | CartPole-v1 | 1 | 1,000 | 3.00 +- 0.00 |"), row


# ---- the sweep scripts: each writes into, and plots, a folder of its own ----

SWEEP_SCRIPTS = ["ppo.sh", "ppo_atari_envpool.sh", "ppo_continuous_action.sh", "ppo_continuous_action_envpool.sh"]


def fake_python(tmp_path) -> tuple[str, str]:
    """A PYTHON that records each call's arguments (one JSON list a line) and does nothing else."""
    record = tmp_path / "calls.jsonl"
    recorder = tmp_path / "recorder.py"
    recorder.write_text(f"import json, sys\nopen({str(record)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    fake = tmp_path / "fake_python"
    fake.write_text(f'#!/usr/bin/env bash\nexec {shlex.quote(sys.executable)} {shlex.quote(str(recorder))} "$@"\n')
    fake.chmod(0o755)
    return str(fake), str(record)


def value_after(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


@pytest.mark.parametrize("script", SWEEP_SCRIPTS)
def test_each_sweep_writes_and_plots_its_own_folder(tmp_path, script):
    python, record = fake_python(tmp_path)
    sweep = str(tmp_path / "my sweep")  # a space: the folder must survive the --command string
    env = {**os.environ, "PYTHON": python, "SWEEP": sweep, "SAMPLE_EFFICIENT": "1"}
    result = subprocess.run(["bash", os.path.join(REPO, "benchmark", script)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert f"sweep folder: {sweep}" in result.stdout
    calls = [json.loads(line) for line in open(record)]
    sweeps = [call for call in calls if call[:2] == ["-m", "cleanrl_utils.benchmark"]]
    plots = [call for call in calls if call[:2] == ["-m", "cleanrl_utils.plot"]]
    assert sweeps and len(plots) == 1
    for call in sweeps:
        (command,) = value_after(call, "--command")
        assert value_after(shlex.split(command), "--log-dir") == [sweep]  # every run goes into the sweep's folder
        assert value_after(call, "--log-dir") == [os.path.join(sweep, "logs")]  # and so do the logs
    assert value_after(plots[0], "--log-dir") == [sweep]  # only that folder is plotted
    assert value_after(plots[0], "--output-dir") == [os.path.join(sweep, "plots")]


@pytest.mark.parametrize("script", SWEEP_SCRIPTS)
def test_a_sweeps_default_folder_is_new_and_named_after_it(tmp_path, script):
    python, record = fake_python(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "SWEEP"} | {"PYTHON": python}
    result = subprocess.run(["bash", os.path.join(REPO, "benchmark", script)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    name = script[: -len(".sh")]
    (plot,) = [call for call in map(json.loads, open(record)) if call[:2] == ["-m", "cleanrl_utils.plot"]]
    assert re.fullmatch(rf"runs/sweeps/{name}-\d{{8}}-\d{{6}}", value_after(plot, "--log-dir")[0])


ALL_SWEEPS = sorted(
    name
    for name in os.listdir(os.path.join(REPO, "benchmark"))
    if name.endswith(".sh")
    and name != "common.sh"
    and 'sweep_arguments "$@"' in open(os.path.join(REPO, "benchmark", name)).read()
)


def test_every_sweep_script_reads_its_arguments():
    """Every script that runs trainings through cleanrl_utils.benchmark reads its arguments: a sweep (settings from
    variables) through sweep_arguments, a throughput script (positional settings) through usage_on_help."""
    folder = os.path.join(REPO, "benchmark")
    texts = {name: open(os.path.join(folder, name)).read() for name in os.listdir(folder) if name.endswith(".sh")}
    launchers = [
        name
        for name, text in texts.items()
        if name.endswith(".sh") and "cleanrl_utils.benchmark" in text and 'usage_on_help "$@"' not in text
    ]
    assert len(ALL_SWEEPS) >= 14 and set(launchers) <= set(ALL_SWEEPS) | {"common.sh"}, sorted(launchers)


@pytest.mark.parametrize("script", ALL_SWEEPS)
def test_a_sweep_script_prints_its_help_and_refuses_arguments_before_running_anything(tmp_path, script):
    """Trial 4, N6: `--help` started the whole sweep (9 runs of 500k steps), and so did any stray argument."""
    python, record = fake_python(tmp_path)
    env = {**os.environ, "PYTHON": python, "SWEEP": str(tmp_path / "sweep")}
    path = os.path.join(REPO, "benchmark", script)
    help_result = subprocess.run(["bash", path, "--help"], capture_output=True, text=True, env=env, cwd=REPO)
    assert help_result.returncode == 0 and "bash benchmark/" in help_result.stdout, help_result.stderr
    extra = subprocess.run(["bash", path, "extra-arg"], capture_output=True, text=True, env=env, cwd=REPO)
    assert extra.returncode == 2 and extra.stderr.count("\n") == 1, extra.stderr
    assert extra.stderr.startswith(f"error: {script} takes no arguments, got 'extra-arg'")
    assert not os.path.exists(record)  # nothing ran


POSITIONAL_SCRIPTS = sorted(
    name
    for name in os.listdir(os.path.join(REPO, "benchmark"))
    if name.endswith(".sh")
    and name != "common.sh"
    and 'usage_on_help "$@"' in open(os.path.join(REPO, "benchmark", name)).read()
)


@pytest.mark.parametrize("script", POSITIONAL_SCRIPTS)
def test_a_positional_script_refuses_an_extra_argument_before_running_anything(tmp_path, script):
    """Trial, Q2: `bash benchmark/ppo_atari_lstm_envpool_sps.sh Pong-v5 100 2 extra` ignored `extra` and ran."""
    text = open(os.path.join(REPO, "benchmark", script)).read()
    usage = re.findall(rf"^#.*\bbash benchmark/{re.escape(script)} (.+?)\s*$", text, re.MULTILINE)[0]  # the first
    most = len(usage.split())
    python, record = fake_python(tmp_path)
    env = {**os.environ, "PYTHON": python}
    args = ["Pong-v5", "100", "2", "1"][:most] + ["extra"]
    result = subprocess.run(["bash", os.path.join(REPO, "benchmark", script), *args], capture_output=True, text=True, env=env)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and not result.stdout, result.stderr
    assert result.stderr.startswith(f"error: {script} takes at most {most} arguments {usage}, got 'extra'"), result.stderr
    assert not os.path.exists(record)  # nothing ran, not even the env-id check
    assert len(POSITIONAL_SCRIPTS) >= 14


def test_gpu_check_without_out_dir_gives_one_line_before_running_anything(tmp_path):
    """Trial, R7: no argument printed bash's own `line 15: 1: give an output folder (...)`."""
    python, record = fake_python(tmp_path)
    env = {**os.environ, "PYTHON": python}
    result = subprocess.run(["bash", os.path.join(REPO, "benchmark", "gpu_check.sh")], capture_output=True, text=True, env=env)
    assert result.returncode == 2 and not result.stdout, result.stderr
    assert result.stderr == "error: gpu_check.sh needs OUT_DIR (usage: bash benchmark/gpu_check.sh --help)\n"
    assert not os.path.exists(record)  # nothing ran


@pytest.mark.parametrize("where", ["file", "below_a_file", "proc"])
def test_gpu_check_into_an_unwritable_out_dir_gives_one_line_before_running_anything(tmp_path, where):
    """Trial, R2: a file as OUT_DIR printed `mkdir: cannot create directory ...` and launched every job anyway."""
    python, record = fake_python(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("")
    out = {"file": str(afile), "below_a_file": str(afile / "x"), "proc": "/proc/nope"}[where]
    env = {**os.environ, "PYTHON": python}
    result = subprocess.run(
        ["bash", os.path.join(REPO, "benchmark", "gpu_check.sh"), out, "1"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 2 and not result.stdout, result.stderr
    assert result.stderr == f"error: OUT_DIR '{out}' is not a writable folder\n"
    assert not os.path.exists(record)  # nothing ran
    assert afile.read_text() == ""


GPU_CHECK = os.path.join(REPO, "benchmark", "gpu_check.sh")
GPU_CHECK_ROWS = dict(re.findall(r'^  \[(\w+)\]="(.*)"$', open(GPU_CHECK).read(), re.MULTILINE))
TRAINING_SCRIPTS = sorted(name[: -len(".py")] for name in os.listdir(os.path.join(REPO, "cleanrl")) if name != "__init__.py")


def test_gpu_check_has_a_row_for_every_training_script():
    """Trial 9, T9: its table covered 17 of the 25 scripts; a script added without a row fails here."""
    assert sorted(GPU_CHECK_ROWS) == TRAINING_SCRIPTS
    for name, command in GPU_CHECK_ROWS.items():
        assert f"cleanrl/{name}.py" in command.split(), (name, command)


# Stands in for python in gpu_check.sh: the two-ranks launch is refused as the script refuses it on one GPU, a
# training saves a model where its --log-dir points, and a call whose arguments contain $FAIL exits 1.
FAKE_GPU_PYTHON = """#!/usr/bin/env bash
case " $* " in *" --nproc-per-node 2 "*)
  echo "error: 2 processes per host, but this host has 1 CUDA device(s) and each process needs its own" >&2
  exit 1
esac
if [ -n "${FAIL:-}" ] && [[ " $* " == *"$FAIL"* ]]; then exit 1; fi
while [ "$#" -gt 1 ]; do
  [ "$1" != --log-dir ] || { mkdir -p "$2/run" && touch "$2/run/agent.cleanrl_model"; }
  shift
done
"""


@pytest.mark.parametrize(
    "fail,run,codes,failed",
    [
        ("", "c51", "train rc 0 (.*), evaluate rc 0", 0),
        (" cleanrl/c51.py ", "c51", "train rc 1 (.*), evaluate rc -", 1),  # a training fails: nothing to evaluate
        ("/pqn/run/agent.cleanrl_model", "pqn", "train rc 0 (.*), evaluate rc 1", 1),  # its evaluation fails
    ],
)
def test_gpu_check_exits_0_only_when_every_check_passed(tmp_path, fail, run, codes, failed):
    """Trial 9, T10: failed runs were listed in summary.txt, and the check exited 0 without a word."""
    python = tmp_path / "fake_python"
    python.write_text(FAKE_GPU_PYTHON)
    python.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": str(python), "FAIL": fail}
    result = subprocess.run(["bash", GPU_CHECK, str(out), "120"], capture_output=True, text=True, env=env, timeout=300)
    summary = (out / "summary.txt").read_text()
    assert re.search(rf"^{run}: {codes} ", summary, re.MULTILINE), summary
    assert summary.count(": train rc ") == len(TRAINING_SCRIPTS), summary
    assert not result.stdout
    if not failed:
        assert result.returncode == 0 and not result.stderr, result.stderr
        return
    runs = len(TRAINING_SCRIPTS)
    assert result.returncode == 1 and result.stderr == f"gpu_check: 1 of {runs} runs failed (see {out}/summary.txt)\n"


def test_gpu_check_where_every_run_fails_exits_1_with_one_line(tmp_path):
    """Trial 9, T10: `PYTHON=/bin/false bash benchmark/gpu_check.sh OUT 120` printed nothing and exited 0."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": "/bin/false"}
    result = subprocess.run(["bash", GPU_CHECK, str(out), "120"], capture_output=True, text=True, env=env, timeout=300)
    runs = len(TRAINING_SCRIPTS)
    assert result.returncode == 1 and not result.stdout, result.stderr
    assert result.stderr == (
        f"gpu_check: {runs} of {runs} runs failed, the two-ranks refusal check failed, 5 speed row(s) failed "
        f"(see {out}/summary.txt)\n"
    )
    assert (out / "summary.txt").read_text().count(": train rc 1 ") == runs


LAYOUT_SCRIPTS = sorted(name for name in os.listdir(os.path.join(REPO, "benchmark")) if name.endswith("_cleanrl_layout.py"))


TOO_SHORT = ["--total-timesteps", "100"]


@pytest.mark.parametrize("script", LAYOUT_SCRIPTS)
def test_a_layout_script_refuses_a_run_too_short_to_print_anything(layout_refusals, script):
    """Trial, Q3: `--total-timesteps 100` ran 0 iterations, printed nothing and exited 0, so the throughput script
    failed on a missing SPS figure with an empty "end of its log"."""
    outcome = layout_refusals[(script, tuple(TOO_SHORT))]
    result = outcome.result
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and not result.stdout, result.stderr
    replay = script.startswith(("sac", "c51", "rainbow"))
    rollout = 2048 if script.startswith("rpo") else 1024  # CleanRL's 1 env x 2,048 steps; 8 x 128 on Atari
    expected = "leaves no learning-phase step" if replay else f"is smaller than one rollout ({rollout} steps)"
    assert result.stderr.startswith(f"error: --total-timesteps 100 {expected}"), result.stderr
    assert not outcome.log_dir.exists()


LAYOUT_BAD_INPUT = [  # trial 14: each was a traceback, or ran (a reversed support trained and exited 0)
    ("c51_atari_envpool_cleanrl_layout.py", ["--buffer-size", "0"], "error: --buffer-size must be a positive integer"),
    ("c51_atari_envpool_cleanrl_layout.py", ["--v-min", "10", "--v-max", "-10"], "error: --v-min 10.0 and --v-max -10.0"),
    # trial 17, U5: --n-atoms 1 (IndexError; Rainbow ZeroDivisionError) and 10^8 were tracebacks; 1e-6 wide trained
    ("c51_atari_envpool_cleanrl_layout.py", ["--n-atoms", "1"], "error: --n-atoms must be in [2, 10000], got 1"),
    ("rainbow_atari_envpool_cleanrl_layout.py", ["--n-atoms", "1"], "error: --n-atoms must be in [2, 10000], got 1"),
    ("c51_atari_envpool_cleanrl_layout.py", ["--n-atoms", "100000000"], "error: --n-atoms must be in [2, 10000]"),
    ("rainbow_atari_envpool_cleanrl_layout.py", ["--v-min", "0", "--v-max", "1e-6"], "error: --v-min 0.0, --v-max 1e-06"),
    # trial 18 cosmetic: the default --v-max was printed as the int "10"
    ("rainbow_atari_envpool_cleanrl_layout.py", ["--v-min", "-1e39"], "error: --v-min -1e+39 and --v-max 10.0 must"),
    ("c51_atari_envpool_cleanrl_layout.py", ["--env-id", "NoSuch-v5"], "error: --env-id 'NoSuch-v5' is not an EnvPool"),
    ("rainbow_atari_envpool_cleanrl_layout.py", ["--n-step", "0"], "error: --n-step must be a positive integer"),
    ("rainbow_atari_envpool_cleanrl_layout.py", ["--learning-rate", "nan"], "error: --learning-rate must be a finite"),
    ("sac_atari_envpool_cleanrl_layout.py", ["--batch-size", "0"], "error: --batch-size must be a positive integer"),
    ("rpo_continuous_action_cleanrl_layout.py", ["--rpo-alpha", "-1"], "error: --rpo-alpha must be >= 0"),
    ("rpo_continuous_action_cleanrl_layout.py", ["--env-id", "Pong-v5"], "error: --env-id 'Pong-v5' is an EnvPool Atari"),
    # trial 15 set-up: CleanRL's 1M default was numpy's _ArrayMemoryError traceback, a run folder left behind
    ("c51_atari_envpool_cleanrl_layout.py", ["--buffer-size", "100000000"], "error: CleanRL's replay of whole frame"),
    ("rainbow_atari_envpool_cleanrl_layout.py", ["--buffer-size", "100000000"], "error: CleanRL's replay of whole"),
    ("sac_atari_envpool_cleanrl_layout.py", ["--buffer-size", "100000000"], "error: CleanRL's replay of whole frame"),
    # trial 15, S4: the four baselines without check_baseline_args ran these and exited 0, or gave tracebacks
    ("ppo_atari_envpool_cleanrl_layout.py", ["--learning-rate", "nan"], "error: --learning-rate must be a finite"),
    ("ppo_atari_envpool_cleanrl_layout.py", ["--ent-coef", "inf"], "error: --ent-coef must be a finite"),
    ("ppo_atari_envpool_cleanrl_layout.py", ["--env-id", "Hopper-v4"], "error: --env-id 'Hopper-v4' is an EnvPool MuJoCo"),
    ("ppo_atari_lstm_envpool_cleanrl_layout.py", ["--gamma", "2"], "error: --gamma must be in [0, 1], got 2.0"),
    ("ppo_atari_lstm_envpool_cleanrl_layout.py", ["--clip-coef", "-1"], "error: --clip-coef must be positive"),
    ("pqn_atari_envpool_cleanrl_layout.py", ["--q-lambda", "-1"], "error: --q-lambda must be in [0, 1], got -1.0"),
    ("pqn_atari_envpool_cleanrl_layout.py", ["--start-e", "5"], "error: --start-e must be in [0, 1], got 5.0"),
    ("sac_continuous_action_cleanrl_layout.py", ["--tau", "2"], "error: --tau must be in (0, 1], got 2.0"),
    ("sac_continuous_action_cleanrl_layout.py", ["--buffer-size", "100"], "error: --batch-size 256 is larger than"),
    ("sac_continuous_action_cleanrl_layout.py", ["--env-id", "Breakout-v5"], "error: --env-id 'Breakout-v5' is an"),
    ("c51_atari_envpool_cleanrl_layout.py", ["--end-e", "1.5"], "error: --end-e must be in [0, 1], got 1.5"),
    (
        "ppo_atari_envpool_cleanrl_layout.py",
        ["--total-timesteps", str(10**20)],
        "error: --total-timesteps must be at most",
    ),
]


@pytest.fixture(scope="module")
def layout_refusals(tmp_path_factory) -> dict:
    """What a user sees for each refused command line of the layout scripts (TOO_SHORT for each, and
    LAYOUT_BAD_INPUT), each script's lines run in one interpreter (tests/script_cases.py: imports paid once per
    script, not once per line), each with a --log-dir of its own, to check nothing was written there.
    (script, flags as a tuple) -> namespace(result, log_dir)."""
    cases = [(script, TOO_SHORT) for script in LAYOUT_SCRIPTS] + [(script, flags) for script, flags, _ in LAYOUT_BAD_INPUT]
    base = tmp_path_factory.mktemp("layout_refusals")
    outcomes = {}
    for script in sorted({script for script, _ in cases}):
        own = [flags for name, flags in cases if name == script]
        log_dirs = [base / f"{script}-{i}" for i in range(len(own))]
        lines = [[*flags, "--log-dir", str(log_dir)] for flags, log_dir in zip(own, log_dirs)]
        results = run_script_cases(script.removesuffix(".py"), lines, folder="benchmark")
        for flags, result, log_dir in zip(own, results, log_dirs):
            outcomes[(script, tuple(flags))] = SimpleNamespace(result=result, log_dir=log_dir)
    return outcomes


@pytest.mark.parametrize("script, flags, expected", LAYOUT_BAD_INPUT)
def test_a_layout_script_refuses_bad_input_in_one_line(layout_refusals, script, flags, expected):
    outcome = layout_refusals[(script, tuple(flags))]
    result = outcome.result
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and result.stderr.startswith(expected), result.stderr
    assert not outcome.log_dir.exists()


@pytest.mark.parametrize("script", [name for name in LAYOUT_SCRIPTS if name.startswith(("c51", "rainbow", "sac_atari"))])
def test_a_replay_layout_script_prints_its_last_line_at_the_end(tmp_path, script):
    """Trial 14: the replay baselines print every 100 steps of the learning phase, so a 1,050-step run's last line
    was at step 1,000. Here a line at step 200, and the last at 250."""
    flags = ["--env-id", "Pong-v5", "--total-timesteps", "250", "--learning-starts", "150", "--buffer-size", "2000"]
    result = subprocess.run(
        [sys.executable, os.path.join("benchmark", script), *flags, "--log-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1].startswith("step 250/250  SPS "), result.stdout[-500:]


def test_a_run_that_exits_0_without_an_sps_figure_is_named_in_one_line(tmp_path):
    """Trial, Q3: the failure said "the end of its log, cleanrl.log:" and then nothing."""
    python, record = fake_python(tmp_path)  # every run exits 0 and prints nothing
    script = os.path.join(REPO, "benchmark", "ppo_atari_lstm_envpool_sps.sh")
    result = subprocess.run(
        ["bash", script, "Pong-v5", "100", "1"], capture_output=True, text=True, env={**os.environ, "PYTHON": python}
    )
    assert result.returncode != 0 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr == "error: a run exited 0 without printing its SPS figure (no 'SPS n' line in its log, cleanrl.log)\n"


def test_a_real_sweep_keeps_to_its_folder(tmp_path):
    sweep = tmp_path / "sweep"
    env = {**os.environ, "PYTHON": sys.executable, "SWEEP": str(sweep), "ENVS": "CartPole-v1", "SEEDS": "1 2"}
    env |= {"TOTAL": "1024", "WORKERS": "2"}
    result = subprocess.run(
        ["bash", os.path.join(REPO, "benchmark", "ppo.sh")], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dirs = sorted(d for d in os.listdir(sweep) if d.startswith("CartPole-v1__ppo__"))
    assert len(run_dirs) == 2
    assert sorted(os.listdir(sweep / "logs")) == ["ppo__CartPole-v1__1.log", "ppo__CartPole-v1__2.log"]
    assert "| ppo | CartPole-v1 | 2 | 1,024 |" in (sweep / "plots" / "summary.md").read_text()


def test_an_off_policy_run_is_finished_at_num_iterations_x_num_envs(tmp_path):
    """DQN-style hyperparameters: an iteration is one step of every env (no num_steps), and batch_size is the
    replay minibatch, which says nothing about the run's length."""
    args = SimpleNamespace(env_id="Breakout-v5", exp_name="dqn_atari_envpool", seed=1, track=False, total_timesteps=1000)
    args.num_envs, args.batch_size, args.num_iterations = 2, 32, 500
    writer = make_writer(args, "run", str(tmp_path / "Breakout-v5__dqn_atari_envpool__1__1700000000"))
    for step in range(100, 1100, 100):
        writer.add_scalar("charts/episodic_return", 1.0, step)
    writer.close()
    (run,) = load_runs(str(tmp_path), "charts/episodic_return")
    assert (run.expected_steps, run.last_step, run.finished) == (1000, 1000, True)


# ---- plot: a run is finished by its own end record, not by its last scalar's step (issue 25, defect 1) ----


def write_every_1000_steps_run(log_dir, seed: int, total: int, end_step: int | None):
    """A SAC-style run of `total` steps (one env) that logs its scalars every 1,000 steps, so its last
    scalar is short of `total`; `end_step` is what the run records at its end (None: an older run, without it)."""
    from cleanrl_utils.run import record_end_step

    args = SimpleNamespace(env_id="Pendulum-v1", exp_name="sac", seed=seed, track=False, total_timesteps=total)
    args.num_envs, args.batch_size, args.num_iterations = 1, 256, total
    writer = make_writer(args, "run", str(log_dir / f"Pendulum-v1__sac__{seed}__1700000000"))
    for step in range(1000, (end_step or total) + 1, 1000):
        writer.add_scalar("charts/episodic_return", -1000.0 + step / 10, step)
    if end_step is not None:
        record_end_step(writer, end_step)
    writer.close()


def test_a_run_that_logs_every_1000_steps_is_finished_by_its_own_end_record(tmp_path):
    write_every_1000_steps_run(tmp_path, 1, 9500, end_step=9500)  # finished: was left out (last scalar at 9,000)
    write_every_1000_steps_run(tmp_path, 2, 9500, end_step=4000)  # stopped by Ctrl-C at 4,000: unfinished
    write_every_1000_steps_run(tmp_path, 3, 9500, end_step=None)  # an older run: judged by its last scalar, as before
    runs = {run.seed: run for run in load_runs(str(tmp_path), "charts/episodic_return")}
    assert {seed: (run.last_step, run.finished) for seed, run in runs.items()} == {
        1: (9500, True),
        2: (4000, False),
        3: (9000, False),
    }


def test_a_real_dqn_run_short_of_a_logging_step_plots_as_finished(tmp_path):
    """dqn.py logs every 1,000 steps: a 1,500-step run logs its last scalar at 1,000."""
    from helpers import run_script

    result = run_script(
        "dqn",
        *["--total-timesteps", "1500", "--learning-starts", "200", "--buffer-size", "1000", "--log-dir", str(tmp_path)],
        env={"OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = load_runs(str(tmp_path), "charts/episodic_return")
    assert (run.expected_steps, run.last_step, run.finished) == (1500, 1500, True)


# ---- benchmark: signals passed on to the trainings, logs kept across sweeps (issue 25, defects 11, 12, traceback 4) ----

# A stand-in training: says it started, then on its first Ctrl-C or SIGTERM says so and exits 0 after a
# short "checkpoint" (as a script's StopAfterIteration does); unsignalled, it would run for a minute.
FAKE_TRAINING = """
import os, signal, sys, time
seed = sys.argv[sys.argv.index("--seed") + 1]
def stop(signum, frame):
    print(f"got {signal.Signals(signum).name}", flush=True)
    time.sleep(0.5)
    sys.exit(0)
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGHUP, stop)
print(f"started seed {seed} pid {os.getpid()}", flush=True)
time.sleep(60)
"""


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, "timed out"
        time.sleep(0.1)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not open(f"/proc/{pid}/stat").read().split()[2] == "Z"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])  # SIGHUP: trial 28
def test_a_signal_to_the_runner_is_passed_on_waited_for_and_summarised(tmp_path, signum):
    script = tmp_path / "train.py"
    script.write_text(FAKE_TRAINING)
    logs = tmp_path / "logs"
    runner = subprocess.Popen(
        [sys.executable, "-m", "cleanrl_utils.benchmark", "--command", f"{sys.executable} {script}"]
        + ["--env-ids", "A-v0", "--seeds", "1", "2", "3", "--workers", "2", "--log-dir", str(logs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    log_paths = [logs / f"train__A-v0__{seed}.log" for seed in (1, 2)]
    wait_for(lambda: all(path.exists() and "started seed" in path.read_text() for path in log_paths))
    pids = [int(re.search(r"pid (\d+)", path.read_text()).group(1)) for path in log_paths]
    runner.send_signal(signum)  # was: SIGTERM killed the runner and orphaned both trainings; Ctrl-C, a traceback
    stdout, stderr = runner.communicate(timeout=60)
    assert runner.returncode == 128 + signum, stdout + stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert not any(alive(pid) for pid in pids)
    for path in log_paths:  # each training got the signal exactly once: a second would abort it without saving
        assert path.read_text().count(f"got {signum.name}") == 1
    assert not (logs / "train__A-v0__3.log").exists()  # nothing starts after the signal
    assert f"sweep stopped by {signum.name}: 0 of 3 runs finished, 2 stopped, 0 failed, 1 not started" in stdout
    # the stopped runs are not called failed on the way (was: "FAILED A-v0 seed 1 (exit 0)" then "0 failed")
    assert "FAILED" not in stdout and "stopped A-v0 seed 1 (exit 0)" in stdout and "0 failed, 2 stopped" in stdout
    assert "not started A-v0 seed 3" in stdout


def test_a_second_sweep_keeps_the_first_sweeps_logs(tmp_path):
    script = tmp_path / "say.py"
    script.write_text("import os, sys\nprint('sweep', os.environ['SWEEP_NUMBER'], 'seed', sys.argv[-1])\n")
    for number in ("one", "two"):
        result = benchmark_cli(
            *["--command", f"{sys.executable} {script}", "--env-ids", "A-v0", "--seeds", "1", "--log-dir", str(tmp_path)],
            env={"SWEEP_NUMBER": number},
        )
        assert result.returncode == 0, result.stdout + result.stderr
    log = (tmp_path / "say__A-v0__1.log").read_text()  # was: the second sweep's "w" emptied the first's log
    assert log.index("sweep one seed 1") < log.index("sweep two seed 1")
    assert log.count("==== ") == 2 and f"{script} --env-id A-v0 --seed 1" in log


@pytest.mark.parametrize("where", ["a regular file", "under a regular file", "/proc"])
def test_plot_into_an_unwritable_output_dir_gives_one_line(tmp_path, where):
    from helpers import assert_one_error_line

    write_run(tmp_path / "runs", "CartPole-v1", "ppo", 1, [1.0, 2.0, 3.0], [100, 200, 300], 1000)
    quiet = SummaryWriter(str(tmp_path / "runs" / "CartPole-v1__ppo__2__1700000000"))  # no episode: a "left out" note
    quiet.add_scalar("charts/SPS", 100.0, 100)
    quiet.close()
    (tmp_path / "a_file").write_text("")
    output_dir = {
        "a regular file": str(tmp_path / "a_file"),
        "under a regular file": str(tmp_path / "a_file" / "plots"),
        "/proc": "/proc/cleanrl-test/plots",
    }[where]
    result = subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.plot", "--log-dir", str(tmp_path / "runs"), "--output-dir", output_dir],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert_one_error_line(result, [f"--output-dir {output_dir!r} is not a writable folder ("])  # was: a traceback
    assert result.stdout == ""  # trial 4, N5: the notes on the runs came before the error line


def test_ctrl_c_before_the_sweep_starts_gives_one_line():
    """Issue 25, traceback 4: a Ctrl-C while the runner still loads (tyro, the plan), before it takes the signals
    over, printed a KeyboardInterrupt traceback. Here tyro's parser is interrupted, as a Ctrl-C there would."""
    code = (
        "import sys, tyro, cleanrl_utils.benchmark as runner\n"
        "def interrupted(*args, **kwargs): raise KeyboardInterrupt\n"
        "tyro.cli = interrupted\n"
        "sys.argv = ['benchmark', '--command', 'true']\n"
        "runner.run_from_command_line()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 130 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == "error: interrupted (Ctrl-C) before any run started; nothing ran"


def test_short_runs_summarise_without_warnings_and_runs_without_episodes_are_named(tmp_path, capsys):
    """Trial 3: a short off-policy run logs no SPS yet (numpy's 'Mean of empty slice' and a nan cell); on a rising
    curve the lagging moving average put 'best' below 'final'; a run that finished no episode was left out unnamed."""
    import warnings

    log_dir = tmp_path / "runs"
    writer = SummaryWriter(str(log_dir / "Hopper-v4__sac_continuous_action_envpool__1__1700000000"))
    for i, value in enumerate([10.0, 20.0, 30.0, 200.0, 400.0]):  # a short run rising fast at its end, no charts/SPS
        writer.add_scalar("charts/episodic_return", value, (i + 1) * 100)
    writer.close()
    writer = SummaryWriter(str(log_dir / "Pong-v5__ppo_atari_envpool__1__1700000000"))
    writer.add_scalar("charts/SPS", 500.0, 256)  # logged, but no game finished
    writer.close()
    notes: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runs = load_runs(str(log_dir), "charts/episodic_return", notes)
        (row,) = summarise(runs, window=20)
    assert notes == [
        "left out Pong-v5__ppo_atari_envpool__1__1700000000: it logged no 'charts/episodic_return' (no episode finished)"
    ]
    assert row["sps"] is None and "| n/a |" in summary_markdown([row])
    notes = []  # trial 22 cosmetic: another tag's absence is not "no episode finished"
    load_runs(str(log_dir), "losses/value_loss", notes)
    assert (
        "left out Pong-v5__ppo_atari_envpool__1__1700000000: it logged no 'losses/value_loss' (its script does not log "
        "it, or not yet)"
    ) in notes
    # trial 21 cosmetic: another tag's columns were "final return" and "best return"
    header = summary_markdown([row], tag="losses/value_loss").splitlines()[0]
    assert header == "| script | env | seeds | steps | final value loss | highest value loss | SPS |"
    assert row["final_mean"] == pytest.approx(400.0) and row["best"] >= row["final_mean"]


def test_plot_refused_for_a_folder_without_runs_leaves_no_output_folder(tmp_path):
    """Trial 8, S4: the refusal left the empty --output-dir it had just made; trial 9, T5: and, for a nested new
    folder, its new parents."""
    (tmp_path / "empty").mkdir()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cleanrl_utils.plot",
            "--log-dir",
            str(tmp_path / "empty"),
            "--output-dir",
            str(tmp_path / "p" / "sub"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "no run under" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "p").exists()
