"""cleanrl_utils.benchmark (sweep runner) and cleanrl_utils.plot (curves + summary), on real
processes and real tensorboard event files."""

import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from cleanrl_utils.benchmark import Progress, plan_runs, run_all
from cleanrl_utils.plot import load_runs, mean_and_band, moving_average, summarise


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

    out_dir = tmp_path / "plots"
    result = subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.plot", "--log-dir", str(log_dir), "--output-dir", str(out_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
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
