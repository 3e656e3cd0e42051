"""The results campaign (benchmark/campaign.py) and the tables and figures made from its files
(cleanrl_utils.results): a real short run recorded, the skip of finished runs, and the regeneration command on a
small fixture of result files, each figure checked against a brute-force computation."""

import csv
import dataclasses
import functools
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tyro
from helpers import REPO, read_scalars

from cleanrl_utils.results import iqm, optimality_gap, stratified_bootstrap, time_to_score_table, write_summary_csv

spec = importlib.util.spec_from_file_location("campaign", os.path.join(REPO, "benchmark", "campaign.py"))
campaign = importlib.util.module_from_spec(spec)
spec.loader.exec_module(campaign)


def test_a_real_run_is_recorded_with_its_final_return_and_periodic_test(tmp_path, monkeypatch):
    """PPO on Hopper for 5 iterations of 2 envs x 2048 steps, a checkpoint kept every 2: the record's final return is
    the mean of the episodes that ended in the last 5% of the steps (read back from the events by brute force), its
    test curve has one point per kept checkpoint, and summary.csv gets its row."""
    cell = campaign.Cell(
        "ppo_continuous_action_envpool", "ppo_tiny", ("Hopper-v4",), 20480, 4096, ("--num-envs", "2", "--num-steps", "2048")
    )
    args = campaign.CampaignArgs(slice="test", results_dir=str(tmp_path / "results"), runs_dir=str(tmp_path / "runs"))
    monkeypatch.setattr(campaign, "TIANSHOU_EPOCH", 8192)  # a test every 2 iterations
    record = campaign.run_one(cell, "Hopper-v4", 3, args, "test cpu")
    run_dir = os.path.join(args.runs_dir, "ppo_tiny", "Hopper-v4__3")
    (run_dir,) = [os.path.join(run_dir, name) for name in os.listdir(run_dir) if "__" in name]
    episodes = read_scalars(run_dir)["charts/episodic_return"]
    last = [value for step, value in episodes if step > 20480 - 1024]  # the last 5% of 20,480 steps
    assert last and record["final_episodes"] == len(last)
    np.testing.assert_allclose(record["final_return"], np.mean(last), rtol=1e-5)
    assert (record["script"], record["env_id"], record["seed"], record["total_timesteps"]) == (
        "ppo_continuous_action_envpool",
        "Hopper-v4",
        3,
        20480,
    )
    assert record["test_curve"]["step"] == [8192, 16384, 20480]  # every 2 iterations, and the last
    assert record["best_test_return"] == max(record["test_curve"]["return"])
    assert record["train_curve"]["step"] == sorted(record["train_curve"]["step"]) and len(record["train_curve"]["step"]) <= 100
    assert record["wall_seconds"] > 0 and record["cpu_seconds"] > 0
    os.makedirs(tmp_path / "results" / "records" / "ppo_tiny")
    with open(tmp_path / "results" / "records" / "ppo_tiny" / "Hopper-v4__3.json", "w") as file:
        json.dump(record, file)
    with open(write_summary_csv(args.results_dir)) as file:
        (row,) = list(csv.DictReader(file))
    assert (row["exp_name"], row["seed"], row["cpu"]) == ("ppo_tiny", "3", "test cpu")


# PPO on Hopper, 4 iterations of 2 envs x 512 steps, a checkpoint kept every 2 iterations (TIANSHOU_EPOCH below)
TINY_CELL = campaign.Cell(
    "ppo_continuous_action_envpool", "ppo_tiny", ("Hopper-v4",), 4096, 1024, ("--num-envs", "2", "--num-steps", "512")
)


def test_a_run_cut_short_by_the_end_of_a_session_continues_from_its_last_checkpoint(tmp_path, monkeypatch, capsys):
    """A 300k-step SAC run takes longer than a session here, and a session's end kills the campaign and its run: each
    session started it again from scratch and none finished. Now the next start continues from the run's last
    checkpoint, and the record counts both attempts' time, not the pause between them. The first attempt is killed
    (SIGKILL, as a session's end does) once its second kept checkpoint is written."""
    args = campaign.CampaignArgs(slice="test", results_dir=str(tmp_path / "results"), runs_dir=str(tmp_path / "runs"))
    monkeypatch.setattr(campaign, "TIANSHOU_EPOCH", 2048)
    monkeypatch.setattr(campaign, "HEARTBEAT_SECONDS", 0.2)
    log_dir = tmp_path / "runs" / "ppo_tiny" / "Hopper-v4__3"
    real_run_child = campaign.run_child

    def killed_after_its_second_checkpoint(command, while_running, **popen_args):
        def kill_then(process):
            while_running(process)
            while not list(log_dir.glob("*__*/checkpoint-000002048.pt")) and process.poll() is None:
                time.sleep(0.05)
            time.sleep(0.5)  # a heartbeat or two after it
            process.kill()

        return real_run_child(command, while_running=kill_then, **popen_args)

    monkeypatch.setattr(campaign, "run_child", killed_after_its_second_checkpoint)
    with pytest.raises(RuntimeError, match="exited -9"):
        campaign.run_one(TINY_CELL, "Hopper-v4", 3, args, "test cpu")
    (killed,) = json.loads((log_dir / "attempts.json").read_text())
    assert killed["ended"] - killed["started"] > 0.2 and killed["cpu_seconds"] > 0  # its heartbeats' figures
    monkeypatch.setattr(campaign, "run_child", real_run_child)
    time.sleep(3)  # the time between two sessions

    record = campaign.run_one(TINY_CELL, "Hopper-v4", 3, args, "test cpu")
    assert "continuing from" in capsys.readouterr().out and record["attempts"] == 2
    attempts = json.loads((log_dir / "attempts.json").read_text())
    assert attempts[0] == killed and attempts[1]["started"] >= killed["ended"] + 3
    assert record["wall_seconds"] == pytest.approx(sum(a["ended"] - a["started"] for a in attempts), abs=0.1)
    assert record["cpu_seconds"] == pytest.approx(sum(a["cpu_seconds"] for a in attempts), abs=0.1)
    # the curve's wall-clock, by brute force from the events' own times: the last episode's time after the first
    # event, less the pause (3 s, where the curve is rounded to 0.1 s)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (run_dir,) = log_dir.glob("*__*")
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    first = min(events.Scalars(tag)[0].wall_time for tag in events.Tags()["scalars"])
    pause = attempts[1]["started"] - attempts[0]["ended"]
    expected = events.Scalars("charts/episodic_return")[-1].wall_time - first - pause
    assert record["train_curve"]["wall_seconds"][-1] == pytest.approx(expected, abs=0.06)
    # the whole run: episodes to its end, and each kept checkpoint tested, those of the first attempt too
    assert record["total_timesteps"] == 4096 and record["train_curve"]["step"][-1] > 4096 - 1024
    assert record["test_curve"]["step"] == [2048, 4096]
    assert "--resume" not in record["command"] and "--total-timesteps 4096" in record["command"]


def test_a_pause_of_the_campaign_is_no_ones_time(tmp_path, monkeypatch):
    """The guide has background runs stopped (SIGSTOP) while a benchmark runs; the heartbeat then went on after
    SIGCONT as if the run had trained all along, and the pause counted in its wall-clock. Beats every 30 s (a clock
    and a CPU figure given), a 1,000 s stop after the second: two entries, the pause between them, CPU split."""
    # (clock, the process's CPU so far) at each reading: the entry's start (2), 4 heartbeats, the end
    readings = iter([(0, 0.0), (0, 0.0), (30, 10.0), (60, 20.0), (1090, 20.0), (1120, 30.0), (1130, 30.0)])
    cpu = {"now": 0.0}

    def next_clock():
        now, cpu["now"] = next(readings)
        return now

    class Training:
        pid, polls = 0, iter([None, None, None, None, 0])

        def poll(self):
            return next(self.polls)

    monkeypatch.setattr(campaign, "process_cpu_seconds", lambda pid: cpu["now"])
    attempts = []
    timekeeper = campaign.Timekeeper(str(tmp_path), attempts, clock=next_clock, sleep=lambda seconds: None)
    timekeeper.beat(Training())
    timekeeper.end(35.0)
    assert attempts == [
        {"started": 0, "ended": 60, "cpu_seconds": 20.0},
        {"started": 1090, "ended": 1130, "cpu_seconds": 15.0, "after_pause": True},
    ]
    assert json.loads((tmp_path / "attempts.json").read_text()) == attempts and campaign.count_attempts(attempts) == 1


def test_a_run_that_cannot_continue_from_its_checkpoint_starts_again(tmp_path, capsys):
    """A checkpoint an earlier attempt left that the script refuses (here: not a checkpoint at all) does not stop the
    campaign on that run for good: it says so and runs it again from its start."""
    args = campaign.CampaignArgs(slice="test", results_dir=str(tmp_path / "results"), runs_dir=str(tmp_path / "runs"))
    run_dir = tmp_path / "runs" / "ppo_tiny" / "Hopper-v4__3" / "Hopper-v4__ppo_tiny__3__1"
    run_dir.mkdir(parents=True)
    (run_dir / "checkpoint.pt").write_bytes(b"not a checkpoint")
    record = campaign.run_one(dataclasses.replace(TINY_CELL, test_episodes=0), "Hopper-v4", 3, args, "test cpu")
    out = capsys.readouterr().out
    assert "continuing from" in out and "could not continue (exit 1" in out and "running it again from its start" in out
    assert record["attempts"] == 1 and record["total_timesteps"] == 4096 and not run_dir.exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_the_campaign_ends_its_run_with_one_line(tmp_path, signum):
    """Trial 28: SIGTERM or SIGHUP killed the campaign and left its dqn.py training on alone; a Ctrl-C was reported
    as "failed: did not finish" with exit 1. A real dqn-classic run, stopped once it trains. Its folders are given
    relative to the user's folder (trial 29: the run went under the repo, where it starts, and the finished run's
    record was lost to a traceback)."""
    command = [sys.executable, os.path.join(REPO, "benchmark", "campaign.py"), "--slice", "dqn-classic", "--seeds", "1"]
    command += ["--only-env", "CartPole-v1", "--results-dir", "results", "--runs-dir", "runs"]
    campaign = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    log = tmp_path / "runs" / "dqn" / "CartPole-v1__1" / "train.log"
    deadline = time.time() + 120
    while not (log.exists() and "run folder:" in log.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    (training,) = [int(pid) for pid in open(f"/proc/{campaign.pid}/task/{campaign.pid}/children").read().split()]
    campaign.send_signal(signum)
    _, stderr = campaign.communicate(timeout=60)
    assert campaign.returncode == 128 + signum, stderr
    name = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}[signum]
    assert stderr.strip() == (
        f"{name}: benchmark/campaign.py stopped; ended the 1 run it had started; finished runs keep their records; the "
        "next start continues the stopped one from its last checkpoint"
    )
    assert not os.path.exists(f"/proc/{training}")  # ended and waited for, not left training alone
    assert list((tmp_path / "runs" / "dqn" / "CartPole-v1__1").glob("CartPole-v1__dqn__1__*"))  # the run's folder


def test_the_campaign_skips_finished_runs(tmp_path):
    """A run with a results file is finished: --dry-run lists it as done and the rest as to run."""
    runs = tmp_path / "records" / "a2c_continuous_action_envpool"
    runs.mkdir(parents=True)
    (runs / "Hopper-v4__2.json").write_text("{}")
    command = [
        sys.executable,
        "benchmark/campaign.py",
        "--slice",
        "on-policy-mujoco",
        "--results-dir",
        str(tmp_path),
        "--dry-run",
    ]
    out = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert "110 runs, 1 finished, 109 to run" in out
    assert "done  a2c_continuous_action_envpool Hopper-v4 seed 2" in out
    assert "todo  a2c_continuous_action_envpool Hopper-v4 seed 1" in out
    wrong_env = subprocess.run([*command, "--only-env", "Pong-v5"], capture_output=True, text=True, cwd=REPO)
    assert wrong_env.returncode != 0 and "--only-env Pong-v5 is not in slice on-policy-mujoco" in wrong_env.stderr  # P5
    bad = subprocess.run([*command[:3], "tier-9"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith("error: --slice 'tier-9' is not a slice")
    # trial 14: a huge --seeds built its plan for minutes before any line; a file as --results-dir passed, then failed
    # after a run with a traceback
    huge = subprocess.run([*command, "--seeds", "1000000000"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert (
        huge.returncode == 1 and huge.stderr == "error: --seeds must be in 0..100 (0: the slice's own count), got 1000000000\n"
    )
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for flag in ("--results-dir", "--runs-dir"):
        refused = subprocess.run([*command[:4], flag, str(a_file)], capture_output=True, text=True, cwd=REPO, timeout=60)
        assert refused.returncode == 1 and refused.stderr == f"error: {flag} {str(a_file)!r} is a file, not a folder\n"


def test_the_off_policy_slice_runs_sac_and_td3_over_every_seed_before_ddpg(tmp_path):
    """Issue 27's order for the off-policy tier: SAC and TD3 on Hopper and HalfCheetah over 3 seeds, then DDPG as
    time allows. Seed-major over all three put DDPG's seed 1 before SAC's seed 2."""
    command = [sys.executable, "benchmark/campaign.py", "--slice", "off-policy-mujoco", "--results-dir", str(tmp_path)]
    out = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, cwd=REPO, check=True).stdout
    listed = [line.split()[1:] for line in out.splitlines() if line.startswith("  todo")]
    order = [(name.split("_")[0], int(seed)) for name, _env, _word, seed in listed]
    expected = [(name, seed) for seed in (1, 2, 3) for name in ("sac", "td3")] + [("ddpg", seed) for seed in (1, 2, 3)]
    assert order == [item for item in expected for _env in range(2)]


def test_iqm_optimality_gap_and_the_stratified_bootstrap():
    assert iqm(np.array([100.0, 1, 2, 3, 4, 5, 6, 7])) == pytest.approx(np.mean([3, 4, 5, 6]))  # the middle half
    assert optimality_gap(np.array([0.5, 1.5, 0.8])) == pytest.approx((0.5 + 0 + 0.2) / 3)
    # every bootstrap sample keeps each task's run count: with one run per task the sample is the data itself
    point, low, high = stratified_bootstrap([np.array([1.0]), np.array([3.0])], np.mean)
    assert point == low == high == 2.0
    rng = np.random.default_rng(0)
    tasks = [rng.normal(1.0, 0.2, 5), rng.normal(0.5, 0.1, 5)]
    point, low, high = stratified_bootstrap(tasks, iqm)
    assert low < point < high and point == pytest.approx(iqm(np.concatenate(tasks)))


def results_command(results, output) -> list[str]:
    return [sys.executable, "-m", "cleanrl_utils.results", "--results-dir", str(results), "--output-dir", str(output)]


def fixture_record(exp_name: str, script: str, env_id: str, seed: int, final: float, best: float) -> dict:
    steps = list(range(10_000, 1_000_001, 10_000))
    return {
        "script": script, "exp_name": exp_name, "env_id": env_id, "seed": seed, "total_timesteps": 1_000_000,
        "final_return": final, "final_episodes": 5, "best_test_return": best, "wall_seconds": 600.0 + seed,
        "cpu_seconds": 1100.0, "cpu": "fixture cpu",
        "train_curve": {"step": steps, "wall_seconds": [s / 1000 for s in steps], "return": [final * s / 1e6 for s in steps]},
        # seed 1 peaks early: the mean of each seed's own best is not the peak of the seed-mean curve
        "test_curve": {"step": [500_000, 1_000_000], "return": [best / 2 + (600 if seed == 1 else 0), best]},
    }  # fmt: skip


def test_one_command_regenerates_tables_figures_and_the_pages_sections(tmp_path):
    """A fixture of 3 seeds x 2 envs of two run names: the page's tables show mean ± std over seeds beside the
    published figures, mark the cell below Tianshou's by more than one std, and link the PNGs, which exist."""
    results = tmp_path / "results"
    finals = {"Hopper-v4": [1000.0, 1200.0, 1400.0], "HalfCheetah-v4": [4000.0, 5000.0, 6000.0]}
    for env_id, values in finals.items():
        for seed, final in enumerate(values, 1):
            for exp_name, scale in (("a2c_continuous_action_envpool", 1.0), ("a2c_other", 2.0)):
                path = results / "records" / exp_name / f"{env_id}__{seed}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                record = fixture_record(
                    exp_name, "a2c_continuous_action_envpool", env_id, seed, final * scale, final * scale + 100
                )
                path.write_text(json.dumps(record))
    (results / "published.csv").write_text(
        "algorithm,env_id,source,steps,value,metric\n"
        "a2c,Hopper-v4,Tianshou,1000000,1400,best\n"
        "a2c,HalfCheetah-v4,Tianshou,1000000,1830,best\n"
    )
    page = tmp_path / "page.md"
    page.write_text(
        "# A2C\n<!-- results a2c-mujoco: a2c_continuous_action_envpool a2c_other -->\nold text\n<!-- /results -->\nend\n"
        "<!-- results-headline headline: a2c_continuous_action_envpool -->\n<!-- /results -->\n"
        "<!-- results hopper-only: a2c_other @ Hopper-v4 -->\n<!-- /results -->\n"
    )
    output = tmp_path / "out"
    command = results_command(results, output)
    result = subprocess.run([*command, "--docs", str(page)], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == (
        f"12 runs -> {output}/tables.md, 3 PNGs, {results}/summary.csv, 3 page sections filled (1 page changed)"
    )
    text = page.read_text()
    assert "old text" not in text and text.endswith("<!-- /results -->\n") and "\nend\n" in text
    # Hopper seeds 1000/1200/1400: final 1,200 ± 163. Test curves: seed 1 [1,150, 1,100], seed 2 [650, 1,300],
    # seed 3 [750, 1,500]; the seed-mean curve [850, 1,300] peaks at 1M: 1,300 ± 163 (each seed's own best would
    # give 1,317 ± 143). Tianshou's 1,400 is above the mean but within one std: no shortfall mark.
    hopper = [line for line in text.splitlines() if line.startswith("| a2c_continuous_action_envpool | Hopper-v4 |")]
    assert hopper == [
        "| a2c_continuous_action_envpool | Hopper-v4 | 3 | 1M | 1,200 ± 163 | 1,300 ± 163 | 1,400 | - | 10.0 | 18.3 |"
    ]
    assert "▼" not in text
    hopper_only = text[text.index("results hopper-only") :]  # trial 5, P4: a section keeps to its envs
    assert "| a2c_other | Hopper-v4 |" in hopper_only and "HalfCheetah" not in hopper_only
    # IQM of best test / Tianshou over the 6 runs of a2c_continuous_action_envpool, by brute force
    scores = np.sort([(v + 100) / 1400 for v in finals["Hopper-v4"]] + [(v + 100) / 1830 for v in finals["HalfCheetah-v4"]])
    assert "| a2c_continuous_action_envpool | 2 | 6 |" in text and f"{np.mean(scores[1:5]):.2f} [" in text
    for name in ("a2c-mujoco.png", "headline.png", "tables.md"):
        assert (output / name).stat().st_size > 0
    assert f"]({os.path.relpath(output / 'a2c-mujoco.png', tmp_path)})" in text
    with open(results / "summary.csv") as file:
        assert len(list(csv.DictReader(file))) == 12
    # a shortfall is marked: Tianshou's Hopper figure far above every seed
    (results / "published.csv").write_text(
        "algorithm,env_id,source,steps,value,metric\na2c,Hopper-v4,Tianshou,1000000,3000,best\n"
    )
    subprocess.run([*command, "--docs", str(page)], capture_output=True, text=True, cwd=REPO, check=True)
    assert "| 3,000 ▼ |" in page.read_text()
    (tmp_path / "none").mkdir()
    empty = subprocess.run([*command[:3], "--results-dir", str(tmp_path / "none")], capture_output=True, text=True, cwd=REPO)
    assert empty.returncode != 0 and "holds no run records" in empty.stderr


def test_a_longer_run_is_read_against_a_shorter_published_budget_up_to_that_budget(tmp_path):
    """Tianshou reads its 1M figures off 3M-step runs. A 3M run of ours is compared the same way: the peak of the
    seed-mean test curve at or before 1M, not its best over 3M. The IQM uses the same reading."""
    results = tmp_path / "results"
    tests = {1: [900.0, 1000.0, 2500.0], 2: [1100.0, 1200.0, 2600.0], 3: [1000.0, 1300.0, 2700.0]}  # at 0.5M, 1M, 3M
    for seed, returns in tests.items():
        record = fixture_record("a2c_3m", "a2c_continuous_action_envpool", "Hopper-v4", seed, 2000.0, max(returns))
        record["total_timesteps"] = 3_000_000
        record["test_curve"] = {"step": [500_000, 1_000_000, 3_000_000], "return": returns}
        path = results / "records" / "a2c_3m" / f"Hopper-v4__{seed}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
    (results / "published.csv").write_text(
        "algorithm,env_id,source,steps,value,metric\na2c,Hopper-v4,Tianshou,1000000,1400,best\n"
    )
    page = tmp_path / "page.md"
    page.write_text("<!-- results a2c-3m: a2c_3m -->\n<!-- /results -->\n")
    command = results_command(results, tmp_path / "out")
    subprocess.run([*command, "--docs", str(page)], capture_output=True, text=True, cwd=REPO, check=True)
    text = page.read_text()
    # by hand: the seed-mean curve up to 1M is [1,000, 1,166.7]; its peak is at 1M, where the seeds hold 1,000, 1,200
    # and 1,300: 1,167 ± 125, and 1,167 + 125 < 1,400 marks a shortfall. Over all 3M the peak is 2,600 ± 82.
    at_1m = np.array([1000.0, 1200.0, 1300.0])
    assert f"{np.mean(at_1m):,.0f} ± {np.std(at_1m):,.0f}" == "1,167 ± 125"
    row = [line for line in text.splitlines() if line.startswith("| a2c_3m | Hopper-v4 |")]
    assert row == [
        "| a2c_3m | Hopper-v4 | 3 | 3M | 2,000 ± 0 | 2,600 ± 82 | 1,400 (ours to 1M: 1,167 ± 125) ▼ | - | 10.0 | 18.3 |"
    ]
    iqm_at_1m = f"{np.mean(np.sort(at_1m / 1400)):.2f} ["  # 3 runs: the IQM keeps all three
    assert (
        [line for line in text.splitlines() if line.startswith("| a2c_3m | 1 | 3 |")][0].split(" | ")[4].startswith(iqm_at_1m)
    )


def test_one_seed_shows_its_value_alone_and_no_confidence_interval(tmp_path):
    """Trial of 2026-12-06: a cell of one seed read "8,597 ± 0", and its IQM "0.75 [0.75, 0.75]": a spread and an
    interval that one run cannot have. A second seed brings both back."""
    results = tmp_path / "results"
    (results / "published.csv").parent.mkdir(parents=True)
    (results / "published.csv").write_text(
        "algorithm,env_id,source,steps,value,metric\na2c,Hopper-v4,Tianshou,1000000,1400,best\n"
    )
    page = tmp_path / "page.md"
    page.write_text("<!-- results one: a2c_one -->\n<!-- /results -->\n")

    def rows(*seeds: int) -> tuple[str, str]:
        for seed in seeds:
            record = fixture_record("a2c_one", "a2c_continuous_action_envpool", "Hopper-v4", seed, 1000.0 * seed, 1200.0)
            path = results / "records" / "a2c_one" / f"Hopper-v4__{seed}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record))
        command = results_command(results, tmp_path / "out")
        subprocess.run([*command, "--docs", str(page)], capture_output=True, text=True, cwd=REPO, check=True)
        lines = page.read_text().splitlines()
        return next(x for x in lines if x.startswith("| a2c_one | Hopper-v4 |")), next(
            x for x in lines if x.startswith("| a2c_one | 1 |")
        )

    cell, aggregate = rows(1)
    assert cell.split(" | ")[4:6] == ["1,000", "1,200"] and "±" not in cell
    assert aggregate.split(" | ")[3] == f"{1000 / 1400:.2f} (no CI: one run on 1 of 1 tasks)"
    cell, aggregate = rows(2)  # seeds 1 and 2: finals 1,000 and 2,000
    assert cell.split(" | ")[4] == "1,500 ± 500" and aggregate.split(" | ")[3].startswith(f"{1500 / 1400:.2f} [")


def test_one_row_of_two_budgets_is_refused_in_one_line(tmp_path):
    """Trial 14: one cell's seeds at 1M and 3M made one row labelled with whichever seed sorted first."""
    results = tmp_path / "results"
    for seed, total in ((1, 1_000_000), (2, 3_000_000), (3, 1_000_000)):
        record = fixture_record("a2c_x", "a2c_continuous_action_envpool", "Hopper-v4", seed, 1.0, 2.0)
        record["total_timesteps"] = total
        path = results / "records" / "a2c_x" / f"Hopper-v4__{seed}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
    (results / "published.csv").write_text("algorithm,env_id,source,steps,value,metric\n")
    result = subprocess.run(results_command(results, tmp_path / "out"), capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 1 and result.stderr == (
        "error: the records of a2c_x on Hopper-v4 hold different budgets (1,000,000: seeds 1, 3; 3,000,000: seeds 2); "
        "a table row is one budget: give the other budget its own exp_name (e.g. a2c_x_3m)\n"
    )
    assert not (tmp_path / "out").exists() and not (results / "summary.csv").exists()


def test_a_bad_output_dir_or_docs_page_is_one_line_and_nothing_is_written(tmp_path):
    """Trial Q4: --output-dir naming a file, a --docs page that is missing or a folder: one error line, exit non-zero,
    and no summary.csv, no output folder, no tables.md, the good page untouched (the checks come before any write)."""
    results = tmp_path / "results"
    path = results / "records" / "a2c_continuous_action_envpool" / "Hopper-v4__1.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            fixture_record("a2c_continuous_action_envpool", "a2c_continuous_action_envpool", "Hopper-v4", 1, 1000.0, 1100.0)
        )
    )
    (results / "published.csv").write_text("algorithm,env_id,source,steps,value,metric\n")
    page = tmp_path / "page.md"
    original = "<!-- results a: a2c_continuous_action_envpool -->\nold\n<!-- /results -->\n"
    page.write_text(original)
    a_file = tmp_path / "README.md"
    a_file.write_text("a file\n")
    command = [sys.executable, "-m", "cleanrl_utils.results", "--results-dir", str(results)]
    cases = [
        (["--output-dir", str(a_file), "--docs", str(page)], f"error: --output-dir {str(a_file)!r} is not a writable folder"),
        (
            ["--output-dir", str(tmp_path / "out"), "--docs", str(page), str(tmp_path / "nope.md")],
            f"error: --docs page {str(tmp_path / 'nope.md')!r} does not exist",
        ),
        (
            ["--output-dir", str(tmp_path / "out"), "--docs", str(page), str(tmp_path)],
            f"error: --docs page {str(tmp_path)!r} is not a file",
        ),
        (  # trial 18, V4: a PNG among the pages (`--docs docs/*`) was a UnicodeDecodeError traceback
            ["--output-dir", str(tmp_path / "out"), "--docs", str(page), str(tmp_path / "curves.png")],
            f"error: --docs page {str(tmp_path / 'curves.png')!r} is not a UTF-8 text file (a Markdown page is)",
        ),
    ]
    (tmp_path / "curves.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    command_elsewhere = [sys.executable, "-m", "cleanrl_utils.results", "--output-dir", str(tmp_path / "out")]
    for where, problem in ((tmp_path / "missing", "does not exist"), (a_file, "is not a folder")):  # trial 18
        result = subprocess.run([*command_elsewhere, "--results-dir", str(where)], capture_output=True, text=True, cwd=REPO)
        assert result.returncode == 1 and result.stderr.startswith(f"error: --results-dir {str(where)!r} {problem}")
    for flags, line in cases:
        result = subprocess.run([*command, *flags], capture_output=True, text=True, cwd=REPO)
        assert result.returncode != 0 and result.stderr.startswith(line) and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1 and result.stdout == ""
        assert not (results / "summary.csv").exists() and not (tmp_path / "out").exists()
        assert page.read_text() == original and a_file.read_text() == "a file\n"
    # trial 18: a page named twice was filled once and counted twice ("2 page sections filled (1 page changed)")
    result = subprocess.run(
        [*command, "--output-dir", str(tmp_path / "out"), "--docs", str(page), str(page)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0 and "1 page section filled (1 page changed)" in result.stdout, result.stdout + result.stderr


def edited(text: str, **changes) -> str:
    return json.dumps(json.loads(text) | changes)


def reversed_steps(text: str, curve: str) -> str:
    record = json.loads(text)
    record[curve]["step"] = record[curve]["step"][::-1]
    return json.dumps(record)


@pytest.mark.parametrize(
    "content, fragment",
    [
        (lambda good: good[:100], "does not read as JSON (JSONDecodeError"),
        (lambda good: '{"a": 1}', "lacks script, exp_name, env_id"),
        (lambda good: "[1, 2]", "lacks script"),
        # trial 12, P4: every key there, a value wrong: tracebacks naming no file, or (NaN) exit 0 and [nan, nan] shown
        (lambda good: edited(good, final_return="abc"), "final_return = 'abc', not a finite number"),
        (lambda good: edited(good, final_return=float("nan")), "final_return = nan, not a finite number"),
        (lambda good: edited(good, train_curve=None), "train_curve = None, not a mapping of lists"),
        (lambda good: edited(good, test_curve={"step": [1, 2], "return": [1.0]}), "test_curve with lists of different"),
        # trial 13: an empty curve (IndexError after pages were written), a string seed (TypeError), reversed steps
        # (exit 0, a wrong band), a missing field, a zero budget
        (lambda good: edited(good, train_curve={"step": [], "wall_seconds": [], "return": []}), "train_curve with no points"),
        (lambda good: edited(good, seed="1"), "seed = '1', not an integer"),
        (lambda good: edited(good, env_id=""), "env_id = '', not a non-empty string"),
        (lambda good: edited(good, total_timesteps=0), "total_timesteps = 0, not in 1..1e+12"),
        (lambda good: reversed_steps(good, "train_curve"), "train_curve whose steps do not increase"),
        (lambda good: reversed_steps(good, "test_curve"), "test_curve whose steps do not increase"),
        (lambda good: edited(good, test_curve={"return": [1.0]}), "test_curve without step"),
        # trial 14: values that contradict where the record sits, or cannot be, exited 0 with wrong tables
        (lambda good: edited(good, exp_name="ppo_continuous_action_envpool"), "says it is ppo_continuous_action_envpool/"),
        (lambda good: edited(good, env_id="Walker2d-v4"), "says it is a2c_continuous_action_envpool/Walker2d-v4__2.json"),
        (lambda good: edited(good, seed=7), "Hopper-v4__7.json; a record sits at records/<exp_name>/<env_id>__<seed>.json"),
        (lambda good: edited(good, cpu_seconds=-50000.0), "cpu_seconds = -50000.0, not a finite number >= 0"),
        (lambda good: edited(good, total_timesteps=10**30), "total_timesteps = 1000000000000000000000000000000, not in"),
        (lambda good: edited(good, final_return=1e308), "final_return = 1e+308, past +-1e+12"),
        (lambda good: edited(good, test_curve={"step": [50_000_000, 100_000_000], "return": [1.0, 2.0]}), "steps outside"),
        # trial 15: a negative episode count was accepted
        (lambda good: edited(good, final_episodes=-3), "final_episodes = -3, a negative count"),
        # trial 16: every record of a cell naming no script, or another one, read with other published figures, exit 0
        (lambda good: edited(good, script="nosuch_script"), "names the script 'nosuch_script', which cleanrl/ does not"),
        (
            lambda good: edited(
                good, script="ppo_continuous_action_envpool", command="python cleanrl/a2c_continuous_action_envpool.py"
            ),
            "names the script 'ppo_continuous_action_envpool', but its command ran another",
        ),
    ],
)
def test_a_damaged_record_is_one_line_naming_it_and_nothing_is_written(tmp_path, content, fragment):
    """Trial 11, N5: a record cut short or replaced gave a 24-line traceback naming no file (JSONDecodeError,
    KeyError), and left an empty --output-dir. Now one line names the record, and nothing is written."""
    results = tmp_path / "results"
    good = results / "records" / "a2c_continuous_action_envpool" / "Hopper-v4__1.json"
    bad = results / "records" / "a2c_continuous_action_envpool" / "Hopper-v4__2.json"
    good.parent.mkdir(parents=True)
    for path, seed in ((good, 1), (bad, 2)):
        record = fixture_record("a2c_continuous_action_envpool", "a2c_continuous_action_envpool", "Hopper-v4", seed, 1.0, 2.0)
        path.write_text(json.dumps(record))
    bad.write_text(content(bad.read_text()))
    (results / "published.csv").write_text("algorithm,env_id,source,steps,value,metric\n")
    command = results_command(results, tmp_path / "out")
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: the record {str(bad)!r}") and fragment in result.stderr, result.stderr
    assert not (tmp_path / "out").exists() and not (results / "summary.csv").exists()


@pytest.mark.parametrize("other_script", ["dqn", "ppo_continuous_action_envpool"])
def test_one_exp_name_holding_two_scripts_is_refused_in_one_line(tmp_path, other_script):
    """Trial 15, S2: a record naming another script among a2c's (edited, or two scripts run with one --exp-name) was
    read with that script's published figure (PPO's 5,784 in A2C's cell, or none for dqn), exit 0."""
    results = tmp_path / "results"
    folder = results / "records" / "a2c_continuous_action_envpool"
    folder.mkdir(parents=True)
    for seed, script in ((1, other_script), (2, "a2c_continuous_action_envpool"), (3, "a2c_continuous_action_envpool")):
        record = fixture_record("a2c_continuous_action_envpool", script, "HalfCheetah-v4", seed, 1000.0, 1100.0)
        (folder / f"HalfCheetah-v4__{seed}.json").write_text(json.dumps(record))
    (results / "published.csv").write_text("algorithm,env_id,source,steps,value,metric\n")
    result = subprocess.run(results_command(results, tmp_path / "out"), capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    expected = (
        f"error: the records under {str(folder)!r} name 2 scripts (",
        f"{other_script}: HalfCheetah-v4__1",
        "a2c_continuous_action_envpool: HalfCheetah-v4__2, HalfCheetah-v4__3",
        "one exp_name holds one script's runs",
    )
    assert all(fragment in result.stderr for fragment in expected), result.stderr
    assert not (tmp_path / "out").exists() and not (results / "summary.csv").exists()


def test_pages_are_filled_only_for_docs_results_or_when_named_and_the_line_says_what_was_written(tmp_path):
    """R3, R6: in a site copy (README.md, docs/*.md), another --output-dir leaves the pages alone unless named with
    --docs, and says so; a named page without markers gets a warning; the last line counts the PNGs and the page
    sections actually written."""
    results = tmp_path / "results"
    path = results / "records" / "a2c_continuous_action_envpool" / "Hopper-v4__1.json"
    path.parent.mkdir(parents=True)
    record = fixture_record("a2c_continuous_action_envpool", "a2c_continuous_action_envpool", "Hopper-v4", 1, 1000.0, 1100.0)
    path.write_text(json.dumps(record))
    (results / "published.csv").write_text("algorithm,env_id,source,steps,value,metric\n")
    site = tmp_path / "site"
    (site / "docs").mkdir(parents=True)
    marked = "<!-- results {}: a2c_continuous_action_envpool -->\nold\n<!-- /results -->\n"
    pages = {
        "README.md": marked.format("top"),
        "docs/page.md": marked.format("page") + "<!-- results empty: nobody -->\n<!-- /results -->\n",
        "docs/plain.md": "no markers\n",
    }
    for name, text in pages.items():
        (site / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def run(*flags):
        command = [sys.executable, "-m", "cleanrl_utils.results", "--results-dir", str(results), *flags]
        result = subprocess.run(command, capture_output=True, text=True, cwd=site, env=env)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip().splitlines()[-1], result.stderr

    elsewhere = tmp_path / "elsewhere"
    line, err = run("--output-dir", str(elsewhere))
    assert all((site / name).read_text() == text for name, text in pages.items())
    assert line.endswith("0 PNGs, " + f"{results}/summary.csv, 0 page sections filled (0 pages changed)"
                         "; pages left alone: --output-dir is not docs/results; name pages with --docs to fill them")  # fmt: skip
    assert (elsewhere / "tables.md").exists() and not list(elsewhere.glob("*.png")) and err == ""

    line, err = run("--output-dir", str(elsewhere), "--docs", "docs/plain.md", "docs/page.md")
    assert err == "warning: --docs page 'docs/plain.md' has no <!-- results ... --> marker pair; left alone\n"
    assert "old" not in (site / "docs/page.md").read_text() and (site / "README.md").read_text() == pages["README.md"]
    assert line.endswith("1 PNG, " + f"{results}/summary.csv, 2 page sections filled (1 page changed)")
    assert [p.name for p in elsewhere.glob("*.png")] == ["page.png"]  # none for the section without runs
    assert "](../../elsewhere/page.png)" in (site / "docs/page.md").read_text()

    line, err = run()  # the default: docs/results, every page; no warning for the unmarked pages of that list
    assert line.endswith("2 PNGs, " + f"{results}/summary.csv, 3 page sections filled (2 pages changed)") and err == ""
    assert "](docs/results/top.png)" in (site / "README.md").read_text()
    assert "](results/page.png)" in (site / "docs/page.md").read_text()
    assert (site / "docs/plain.md").read_text() == pages["docs/plain.md"]


tts_spec = importlib.util.spec_from_file_location("time_to_score", os.path.join(REPO, "benchmark", "time_to_score.py"))
time_to_score = importlib.util.module_from_spec(tts_spec)
tts_spec.loader.exec_module(time_to_score)


def test_game_counts_read_as_english():  # trial 32: "1 games"
    assert [time_to_score.games(n) for n in (0, 1, 2, 1060)] == ["0 games", "1 game", "2 games", "1,060 games"]


def test_window_means_against_a_brute_force_mean_of_the_last_games():
    returns = np.random.default_rng(0).normal(size=50)
    means = time_to_score.window_means(returns, 20)
    assert np.isnan(means[:19]).all()
    np.testing.assert_allclose(means[19:], [returns[i - 19 : i + 1].mean() for i in range(19, 50)], rtol=1e-5, atol=1e-6)


def test_time_to_score_stops_a_real_run_at_its_target_and_the_results_page_shows_it(tmp_path):
    """PQN on real Pong, 1 env: the target -21 over the last 2 games is met by the 2nd game (every point lost). The
    driver stops the run there with a Ctrl-C (the run saves a checkpoint), and its record holds every game the run
    logged (read back from the events by brute force), the step and minute of the 2nd game, and the stop reason.
    The results command then fills a results-time section with its row and curve. Its folders are given relative
    to the user's folder (trial 29: the run went under the repo, where it starts, and the record read 0 games)."""
    results, runs = tmp_path / "results", tmp_path / "runs"
    command = [sys.executable, os.path.join(REPO, "benchmark", "time_to_score.py"), "--script", "pqn_atari_envpool"]
    command += ["--window", "2", "--target", "-21", "--minutes", "4", "--poll-seconds", "2"]
    command += ["--results-dir", "results", "--runs-dir", "runs"]
    command += ["--script-args=--total-timesteps 50000 --num-envs 1 --num-steps 128 --torch-threads 1"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads((results / "time_to_score" / "pqn_atari_envpool__Pong-v5__1.json").read_text())
    (run_dir,) = [str(path) for path in (runs / "pqn_atari_envpool__Pong-v5__1").iterdir() if path.is_dir()]
    games = read_scalars(run_dir)["charts/episodic_return"]
    assert [[step, value] for step, _, value in record["games"]] == [[step, value] for step, value in games]
    assert record["reached"] and record["stopped_by"] == "target" and games[1][1] == games[0][1] == -21
    assert record["steps_to_target"] == games[1][0] and record["steps_run"] < 50000  # stopped, not run to the end
    assert 0 < record["minutes_to_target"] <= record["minutes_run"] < 4
    assert os.path.exists(os.path.join(run_dir, "checkpoint.pt"))  # the Ctrl-C saved
    # the record's path from the user's folder (trial 31: from the repository's, "../../tmp/...")
    assert (
        result.stdout.strip().splitlines()[-1].endswith("; record: results/time_to_score/pqn_atari_envpool__Pong-v5__1.json")
    )
    page = tmp_path / "page.md"
    page.write_text("<!-- results-time pong: pqn_atari_envpool -->\n<!-- /results -->\n")
    fixture = results / "records" / "a2c_continuous_action_envpool" / "Hopper-v4__1.json"
    fixture.parent.mkdir(parents=True)  # the command needs one campaign record
    fixture.write_text(
        json.dumps(fixture_record("a2c_continuous_action_envpool", "a2c_continuous_action_envpool", "Hopper-v4", 1, 1.0, 2.0))
    )
    rendered = subprocess.run(
        [
            sys.executable,
            "-m",
            "cleanrl_utils.results",
            "--results-dir",
            str(results),
            "--output-dir",
            str(tmp_path / "out"),
            "--docs",
            str(page),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert rendered.returncode == 0, rendered.stderr
    settings = " ".join(record["command"].split()[-8:])  # the --script-args
    row = f"| pqn_atari_envpool | `{settings}` | Pong-v5 | 1 | -21 (last 2 games) | {record['minutes_to_target']:.1f} / {games[1][0]:,} |"
    assert row in page.read_text() and (tmp_path / "out" / "pong.png").stat().st_size > 0
    assert "## Time to score" in (tmp_path / "out" / "tables.md").read_text()


def test_a_time_section_keeps_to_its_games(tmp_path):
    """Time-to-score records of one script on two games: "SCRIPT @ ENV_ID" keeps a section to its game (PQN's Pong
    section took in its Breakout run), and a section without "@" shows both."""
    results = tmp_path / "results"
    fixture = results / "records" / "a2c_continuous_action_envpool" / "Hopper-v4__1.json"
    fixture.parent.mkdir(parents=True)  # the command needs one campaign record
    fixture.write_text(
        json.dumps(fixture_record("a2c_continuous_action_envpool", "a2c_continuous_action_envpool", "Hopper-v4", 1, 1.0, 2.0))
    )
    (results / "published.csv").write_text("algorithm,env_id,source,steps,value,metric\n")
    (results / "time_to_score").mkdir()
    for env_id, last in (("Pong-v5", 18.5), ("Breakout-v5", 12.0)):
        games = [[1000 * i, 0.5 * i, last] for i in range(1, 21)]
        record = dict(script="pqn_atari_envpool", env_id=env_id, seed=1, target=18.0, window=20, cap_minutes=30.0)
        record |= dict(reached=False, minutes_to_target=None, steps_to_target=None, best_window_mean=last)
        record |= dict(last_window_mean=last, minutes_run=10.0, steps_run=20_000, stopped_by="cap", cpu="fixture cpu")
        record |= dict(gpu=None, command="fixture", games=games)
        (results / "time_to_score" / f"pqn_atari_envpool__{env_id}__1.json").write_text(json.dumps(record))
    page = tmp_path / "page.md"
    sections = ("pong: pqn_atari_envpool @ Pong-v5", "breakout: pqn_atari_envpool @ Breakout-v5", "both: pqn_atari_envpool")
    page.write_text("".join(f"<!-- results-time {s} -->\n<!-- /results -->\n" for s in sections))
    command = results_command(results, tmp_path / "out")
    subprocess.run([*command, "--docs", str(page)], capture_output=True, text=True, cwd=REPO, check=True)
    text = page.read_text()
    bodies = [text[text.index(s) :].split("<!-- /results -->")[0] for s in sections]
    games_shown = [[env for env in ("Pong-v5", "Breakout-v5") if f"| {env} |" in body] for body in bodies]
    assert games_shown == [["Pong-v5"], ["Breakout-v5"], ["Pong-v5", "Breakout-v5"]]


def test_time_to_score_stops_at_its_cap_between_polls_and_says_when_no_window_was_full(tmp_path):
    """Trial 31: a 0.4-minute cap ran 0.53 minutes (the cap was checked only after each 15 s poll), and a run with
    fewer games than the window ended "(best mean None)"."""
    command = [sys.executable, os.path.join(REPO, "benchmark", "time_to_score.py"), "--script", "pqn_atari_envpool"]
    command += ["--window", "1000", "--minutes", "0.1", "--poll-seconds", "60", "--results-dir", str(tmp_path / "results")]
    command += ["--runs-dir", str(tmp_path / "runs"), "--script-args=--num-envs 1 --num-steps 32 --torch-threads 1"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads((tmp_path / "results" / "time_to_score" / "pqn_atari_envpool__Pong-v5__1.json").read_text())
    assert record["stopped_by"] == "cap" and record["minutes_run"] < 0.1 + 0.5  # the cap, then the run's own save
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("did not reach 18 in ") and " min (fewer than 1000 games: no mean yet); " in last, last


def test_time_to_score_resume_continues_the_capped_run_and_its_record(tmp_path):
    """--resume: leg 1 of PQN on real Breakout (short games) is capped; leg 2 continues its checkpoint, in its folder, for --minutes more.
    The record keeps leg 1's games as they were and adds leg 2's, read back from leg 2's own events file, at steps
    past leg 1's and minutes past leg 1's total; minutes and caps are the legs' sums, and the table says 2 legs.
    Resumes that would not add up are one line each, before any run, the record untouched: another target, another
    machine (an edited cpu), no record, a record whose run reached its target. Fails if leg 2 started afresh (its
    steps would restart at 0) or if the record dropped a leg's games or minutes."""
    tool = [sys.executable, os.path.join(REPO, "benchmark", "time_to_score.py"), "--script", "pqn_atari_envpool"]
    tool += ["--env-id", "Breakout-v5", "--window", "2", "--target", "1000", "--poll-seconds", "1"]  # never reached
    tool += ["--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")]
    leg_args = ["--minutes", "0.35", "--script-args=--num-envs 4 --num-steps 32 --torch-threads 1"]
    first = subprocess.run([*tool, *leg_args], capture_output=True, text=True, cwd=REPO, timeout=200)
    assert first.returncode == 0, first.stdout + first.stderr
    path = tmp_path / "results" / "time_to_score" / "pqn_atari_envpool__Breakout-v5__1.json"
    leg1 = json.loads(path.read_text())
    (run_dir,) = [p for p in (tmp_path / "runs" / "pqn_atari_envpool__Breakout-v5__1").iterdir() if p.is_dir()]
    leg1_files = {p.name for p in run_dir.iterdir() if p.name.startswith("events.out.tfevents")}
    assert leg1["stopped_by"] == "cap" and len(leg1["games"]) >= 2 and leg1["legs"][0]["cap_minutes"] == 0.35

    def refused(*extra: str, seed: str = "1", record: dict = leg1) -> str:
        """The line the tool exits with (its first check of --resume, run in this process: no run starts)."""
        path.write_text(json.dumps(record))
        args = tyro.cli(time_to_score.TimeToScoreArgs, args=[*tool[2:], "--resume", "--seed", seed, *extra])
        name = f"pqn_atari_envpool__Breakout-v5__{seed}"
        with pytest.raises(SystemExit) as stop:
            machine = dict(cpu=time_to_score.cpu_description(), gpu=None)
            time_to_score.earlier_legs(
                str(tmp_path / "results" / "time_to_score" / f"{name}.json"), str(tmp_path / "runs" / name), args, machine
            )
        assert json.loads(path.read_text()) == record  # untouched
        path.write_text(json.dumps(leg1))
        return stop.value.code

    assert refused("--target", "20").startswith(
        "error: --resume: --target 20 differs from the record's 1000; give --target 1000"
    )
    assert refused(seed="2").startswith("error: --resume: no record ")
    result = subprocess.run([*tool, "--resume", "--seed", "2"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 1 and result.stdout == "" and result.stderr == refused(seed="2") + "\n"  # as a user sees it
    assert "the record's cpu is 'another cpu', this machine's " in refused(record=leg1 | {"cpu": "another cpu"})
    reached = leg1 | {"reached": True, "minutes_to_target": 0.3}
    assert refused(record=reached) == "error: --resume: the run reached 1000 at 0.3 min; nothing to continue"
    checkpoint, mtime = run_dir / "checkpoint.pt", (run_dir / "checkpoint.pt").stat().st_mtime_ns
    os.utime(checkpoint, ns=(mtime + 5 * 10**9, mtime + 5 * 10**9))  # as a leg stopped without a record leaves it
    assert refused().startswith(f"error: --resume: {checkpoint} was written after the record (a leg ended without one)")
    os.utime(checkpoint, ns=(mtime, mtime))

    second = subprocess.run([*tool, "--resume", "--minutes", "0.35"], capture_output=True, text=True, cwd=REPO, timeout=200)
    assert second.returncode == 0, second.stdout + second.stderr
    record = json.loads(path.read_text())
    assert [p for p in run_dir.parent.iterdir() if p.is_dir()] == [run_dir]  # the same run, in its folder
    (leg2_file,) = [p for p in run_dir.iterdir() if p.name.startswith("events.out.tfevents") and p.name not in leg1_files]
    leg2_games = read_scalars(str(leg2_file))["charts/episodic_return"]
    assert leg2_games and leg2_games[0][0] > leg1["games"][-1][0]  # continued past leg 1's steps, not from 0
    n = len(leg1["games"])
    assert record["games"][:n] == leg1["games"]
    assert [[step, value] for step, _, value in record["games"][n:]] == [[step, value] for step, value in leg2_games]
    assert all(seconds > 60 * leg1["minutes_run"] for _, seconds, _ in record["games"][n:])
    assert len(record["legs"]) == 2 and record["legs"][0] == leg1["legs"][0] and record["cap_minutes"] == 0.7
    assert record["legs"][1]["command"].split()[1:3] == ["cleanrl/pqn_atari_envpool.py", "--resume"]
    assert record["minutes_run"] == round(leg1["minutes_run"] + record["legs"][1]["minutes_run"], 2)
    assert record["command"] == leg1["command"] and record["steps_run"] == leg2_games[-1][0]
    assert "(2 legs, caps 0.35 + 0.35 min) |" in time_to_score_table([record])


def test_a_gpu_record_names_its_gpu_and_a_cpu_record_its_cpu_alone():
    base = {"script": "pqn_atari_envpool", "env_id": "Pong-v5", "seed": 1, "target": 18.0, "window": 20, "reached": True}
    base |= {"minutes_to_target": 3.6, "steps_to_target": 1412480, "best_window_mean": 18.6, "minutes_run": 3.7}
    base |= {"steps_run": 1421312, "cap_minutes": 7.0, "cpu": "Xeon, 16 cores"}
    base |= {"command": "python cleanrl/pqn_atari_envpool.py --env-id Pong-v5 --seed 1 --log-dir runs/x --num-envs 128"}
    # written before --cuda existed: no "gpu" key
    older_cpu_record = base | {"command": "python cleanrl/pqn_atari_envpool.py --env-id Pong-v5 --log-dir runs/x --no-cuda"}
    table = time_to_score_table([base | {"gpu": "NVIDIA H200"}, base | {"gpu": None}, older_cpu_record])
    rows = table.splitlines()[2:]
    assert rows[0].startswith("| pqn_atari_envpool | `--num-envs 128` |")
    assert rows[0].endswith("| NVIDIA H200 + Xeon, 16 cores |")
    assert rows[1].endswith("| Xeon, 16 cores |") and rows[2].endswith("| Xeon, 16 cores |")
    assert rows[2].startswith("| pqn_atari_envpool | defaults | Pong-v5 |")  # the driver's own arguments are not settings


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_time_to_score_cuda_without_a_gpu_is_one_line_and_leaves_nothing(tmp_path):
    command = [sys.executable, os.path.join(REPO, "benchmark", "time_to_score.py"), "--script", "pqn_atari_envpool"]
    command += ["--cuda", "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == "error: --cuda needs a CUDA GPU, and torch sees none here; leave --cuda out to train on the CPU\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "env_id, expected",
    [
        ("Hopper-v4", "error: --env-id 'Hopper-v4' is an EnvPool MuJoCo environment; this script takes Atari ones, e.g. "),
        ("Pongg-v5", "error: --env-id 'Pongg-v5' is not an EnvPool Atari environment; did you mean Pong-v5"),
    ],
)
def test_time_to_score_takes_atari_games_only(tmp_path, env_id, expected):
    """Trial 31: `--script ppo_continuous_action_envpool --env-id Hopper-v4` "reached 18" (Pong's target) in 9 s of
    Hopper episodes and wrote a record the results table then showed. The tool times Atari games: one line, first."""
    command = [
        sys.executable,
        os.path.join(REPO, "benchmark", "time_to_score.py"),
        "--script",
        "ppo_continuous_action_envpool",
    ]
    command += ["--env-id", env_id, "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 1 and result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(expected), result.stderr
    assert list(tmp_path.iterdir()) == []


def test_time_to_score_checks_its_folders_before_the_run_and_says_why_a_run_failed(tmp_path):
    """Trial 29: a --results-dir that was a file was a NotADirectoryError traceback after the whole run (the measure
    lost); a run the script refused said only "exited 1; its log: ...". Now the folders are checked first, and the
    script's own line is in the tool's."""
    (tmp_path / "afile").write_text("")
    command = [sys.executable, os.path.join(REPO, "benchmark", "time_to_score.py"), "--script", "pqn_atari_envpool"]
    result = subprocess.run(
        [*command, "--results-dir", str(tmp_path / "afile"), "--runs-dir", str(tmp_path / "runs")],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1 and result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: --results-dir ") and not (tmp_path / "runs").exists()
    command += ["--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs"), "--script-args=--num-envs 0"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(
        "error: the run exited 1 before the target or the cap, saying: error: --num-envs must be a positive integer, got 0;"
    ), result.stderr


def test_a_committing_campaign_regenerates_the_pages_and_leaves_an_edited_page_out(tmp_path, capsys):
    """Trial 10, D1: a campaign committed records while the pages' tables stayed as the last manual regeneration
    left them. With --commit it now regenerates them and commits them with the record; a page with uncommitted
    edits (someone's) is regenerated but not committed, and a line says so. A copy of the campaign in a fresh repo."""
    repo = tmp_path / "repo"
    (repo / "benchmark").mkdir(parents=True)
    (repo / "docs").mkdir()
    shutil.copy(os.path.join(REPO, "benchmark", "campaign.py"), repo / "benchmark" / "campaign.py")
    (repo / "README.md").write_text("# top\n<!-- results-headline top: dqn -->\nold\n<!-- /results -->\n")
    (repo / "docs" / "plain.md").write_text("no markers\n")
    record = repo / "benchmark" / "results" / "records" / "dqn" / "CartPole-v1__1.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps(fixture_record("dqn", "dqn", "CartPole-v1", 1, 400.0, 450.0)))
    git = functools.partial(subprocess.run, cwd=repo, check=True, capture_output=True)
    git(["git", "init", "-q"])
    git(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "start"])
    git(["git", "add", "README.md", "docs/plain.md"])
    git(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "pages"])
    spec = importlib.util.spec_from_file_location("campaign_copy", repo / "benchmark" / "campaign.py")
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    assert copy.REPO == str(repo)
    assert copy.regenerate_pages() == ["docs/results", "README.md"]
    assert "old" not in (repo / "README.md").read_text() and (repo / "docs" / "results" / "tables.md").exists()
    assert (repo / "docs" / "plain.md").read_text() == "no markers\n"
    git(["git", "checkout", "README.md"])
    (repo / "README.md").write_text((repo / "README.md").read_text() + "someone's edit\n")
    assert copy.regenerate_pages() == ["docs/results"]  # regenerated, not committed: the edit is not swept in
    assert "someone's edit" in (repo / "README.md").read_text() and "old" not in (repo / "README.md").read_text()
    assert "a results page has uncommitted edits; regenerated, not committed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "command",
    [["benchmark/campaign.py", "--slice", "on-policy-mujoco", "--dry-run"], ["-m", "cleanrl_utils.evaluate", "--help"]],
)
def test_a_tool_whose_reader_has_gone_ends_without_a_traceback(command):
    """`campaign.py --dry-run | head -3` printed a BrokenPipeError traceback once head had its lines. The reader here
    is gone before the tool writes its first line, so the tool always writes into a closed pipe."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    result = subprocess.run([sys.executable, *command], stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=REPO)
    os.close(write_end)
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
    assert result.returncode == -13  # SIGPIPE, as `yes | head` ends


def test_a_stop_after_a_page_was_filled_names_that_page(tmp_path):
    """Trial 18, V1: a Ctrl-C after results had rewritten a docs page said "the docs pages are untouched". The line
    now names the pages rewritten so far (each whole: written atomically). The signal is sent from inside the
    write, right after the first page."""
    import re
    import textwrap

    shutil.copytree(os.path.join(REPO, "benchmark", "results"), tmp_path / "results")
    pages = [tmp_path / "dqn.md", tmp_path / "ppo.md"]
    for page in pages:  # each section emptied, so that filling rewrites the page
        text = open(os.path.join(REPO, "docs", page.name)).read()
        page.write_text(re.sub(r"(<!-- results [^\n]*-->\n).*?(<!-- /results -->)", r"\1\2", text, flags=re.S))
    out = tmp_path / "out"
    code = f"""
        import os, signal, sys
        sys.argv = ["results", "--results-dir", {str(tmp_path / "results")!r}, "--output-dir", {str(out)!r},
                    "--docs", {str(pages[0])!r}, {str(pages[1])!r}]
        from cleanrl_utils.stop import exit_tool_on_signals
        exit_tool_on_signals("cleanrl_utils.results")
        import cleanrl_utils.results as results
        write_for_real = results.write_atomically
        def write_then_signal(path, write):
            write_for_real(path, write)
            os.kill(os.getpid(), signal.SIGINT)
        results.write_atomically = write_then_signal
        results.main()
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert result.returncode == 130, result.stderr
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        f"Ctrl-C: cleanrl_utils.results stopped; {out} holds the tables and figures written so far; the docs pages "
        f"rewritten, each whole (the last one possibly still as it was): {pages[0]}"
    ]
    assert "<!-- /results -->" in pages[0].read_text() and "| dqn |" in pages[0].read_text()
