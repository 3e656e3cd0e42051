"""The speed probes of benchmark/ that are not speed rows: network_share.py's profiled child counts the network's
arithmetic (convolutions and matrix products, forward and backward) and nothing else; network_share.py and
sac_step_split.py give one line for bad input before anything runs."""

import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import REPO

SCRIPT = os.path.join(REPO, "benchmark", "network_share.py")

# 20 products of 256 x 256 matrices with their backward (2 more products each), and elementwise work that is not
# arithmetic of the network's kind; exits 0 through sys.exit, as the training scripts do
WORKLOAD = """
import sys
import torch

torch.manual_seed(0)
a = torch.randn(256, 256, requires_grad=True)
b = torch.randn(256, 256)
for _ in range(20):
    (a @ b).sum().backward()
    c = torch.exp(b).sin().cos()
conv = torch.nn.Conv2d(4, 8, 3)
conv(torch.randn(2, 4, 16, 16)).sum().backward()
sys.exit(0)
"""


def test_the_child_counts_products_and_convolutions_only(tmp_path):
    workload, out = tmp_path / "workload.py", tmp_path / "arithmetic.txt"
    workload.write_text(WORKLOAD)
    command = [sys.executable, SCRIPT, "--child", str(out), "--", str(workload)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    seconds, wall, threads = out.read_text().splitlines()[0].split()
    ops = dict(item.split("=") for item in out.read_text().splitlines()[1].split())
    assert set(ops) >= {"aten::mm", "aten::convolution_backward"} and not {"aten::exp", "aten::sin"} & set(ops), ops
    assert 0 < float(seconds) < float(wall) and int(threads) >= 1
    assert abs(sum(float(value.rstrip("s")) for value in ops.values()) - float(seconds)) < 0.02 * len(ops)


def test_network_share_bad_input_is_one_line_before_anything_runs(tmp_path):
    for flags, expected in (
        (["--only", "nosuch"], "error: --only 'nosuch': each name must be one of c51_atari_envpool"),
        (["--only", ""], "error: --only '': each name must be one of"),
        (["--only", "c51_atari_envpool", "--steps", "2000"], "error: --steps 2000 leaves too little learning phase"),
        (["--steps", "-5"], "error: --steps must be 0 (each row's own budget) or a positive number of env steps, got -5"),
    ):
        result = subprocess.run(
            [sys.executable, SCRIPT, *flags, "--log-dir", str(tmp_path / "runs")], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 1 and result.stderr.startswith(expected) and result.stderr.count("\n") == 1, result.stderr
        assert result.stdout == "" and not (tmp_path / "runs").exists()  # trial 20: the table's header came first


def test_the_commands_in_network_shares_docstring_pass_its_checks():
    """Trial 29: the docstring's "shorter run", --steps 3000, was refused (at least 3024): advice that did not work."""
    import importlib.util
    import re
    import shlex

    sys.path.insert(0, os.path.dirname(SCRIPT))
    spec = importlib.util.spec_from_file_location("network_share", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = {row.script: row for row in module.ROWS if row.command[0].endswith(".py")}
    commands = [shlex.split(line.split("#")[0]) for line in module.__doc__.splitlines() if "network_share.py" in line]
    assert len(commands) == 2
    for words in commands:
        only = words[words.index("--only") + 1].split(",")
        steps = int(words[words.index("--steps") + 1]) if "--steps" in words else 0
        for name in only:
            assert name in rows and (steps or rows[name].steps) >= module.fewest_steps(rows[name]), (words, name)
    assert re.search(r"--steps \d+", module.__doc__)


@pytest.mark.parametrize(
    "flags, expected",
    [  # trial 19, W6: ZeroDivisionError and IndexError tracebacks; --repeats -3 printed negative times with exit 0
        (["--repeats", "0"], "error: --repeats must be a positive number of timed calls, got 0"),
        (["--repeats", "-3"], "error: --repeats must be a positive number of timed calls, got -3"),
        (["--env-id", "Breakout-v5"], "error: --env-id 'Breakout-v5' is an EnvPool Atari environment"),
        (["--torch-threads", "-1"], "error: --torch-threads must be >= 0"),
    ],
)
def test_sac_step_split_bad_input_is_one_line(flags, expected):
    script = os.path.join(REPO, "benchmark", "sac_step_split.py")
    result = subprocess.run([sys.executable, script, *flags], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 1 and result.stderr.startswith(expected) and result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == ""


BAD_COUNTS = [
    # trial 21, Y3: --steps-scale -1 ran (clamped), nan and inf ended in ValueError and OverflowError tracebacks
    *[("speed_by_machine", ["--steps-scale", flag, "--no-write"], f"--steps-scale must be in (0, 100], got {float(flag)}")
      for flag in ("-1", "0", "nan", "inf", "1e9")],
    *[("speed_by_machine", ["--pairs", flag, "--no-write"], f"--pairs must be in 1..20, got {flag}") for flag in ("0", "-1", "21")],
    *[("noisy_layer_forms", ["--threads", flag], f"--threads must be in 0..1024 (0: torch's default), got {flag}")
      for flag in ("-1", "2000")],
]  # fmt: skip


@pytest.mark.parametrize("tool,flags,expected", BAD_COUNTS)
def test_a_benchmark_tool_refuses_a_count_it_cannot_run_in_one_line(tool, flags, expected):
    script = os.path.join(REPO, "benchmark", f"{tool}.py")
    result = subprocess.run([sys.executable, script, *flags], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and result.stdout == "", result.stdout
    assert result.stderr == f"error: {expected}\n", result.stderr


def first_training_child(process: subprocess.Popen) -> tuple[str, list[str]]:
    """(pid, argv) of the tool's first child that trains (one with --log-dir, not lscpu), within a minute."""
    deadline, child, argv = time.time() + 60, None, []
    while "--log-dir" not in argv and time.time() < deadline:
        time.sleep(0.2)
        children = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
        for child in children:
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    argv = f.read().decode().split("\0")
            except OSError:  # it ended meanwhile
                argv = []
    assert "--log-dir" in argv, "no run started within a minute"
    return child, argv


@pytest.mark.parametrize("signum,name", [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "Ctrl-C")])
def test_a_stopped_benchmark_ends_its_runs_and_removes_their_folder(signum, name):
    """Trial 21, Y4: a SIGTERM to speed_by_machine.py left its training run going on alone (parent 1) and its
    temporary folder behind; a Ctrl-C printed a KeyboardInterrupt traceback. The signal goes to the tool alone (as
    `kill` sends it): its run is ended, their folder removed, one line."""
    script = os.path.join(REPO, "benchmark", "speed_by_machine.py")
    command = [sys.executable, script, "--only", "ppo_atari_envpool", "--idle-only", "--no-write", "--steps-scale", "0.1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    child, argv = first_training_child(process)
    scratch = os.path.dirname(os.path.dirname(argv[argv.index("--log-dir") + 1]))  # <scratch>/<row>-<side>/0
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signum and "Traceback" not in stderr, stderr
    assert stderr.strip() == (
        f"{name}: benchmark/speed_by_machine.py stopped; ended the 1 run it had started; removed its scratch folder"
    )
    assert not os.path.exists(f"/proc/{child}") and not os.path.exists(scratch)


@pytest.mark.parametrize("signum,name", [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "Ctrl-C")])
def test_a_stopped_time_to_score_ends_its_run_and_writes_no_record(tmp_path, signum, name):
    """Trial 23, A3: a SIGTERM to time_to_score.py exited without a word, its training run going on alone (parent 1);
    a Ctrl-C printed a KeyboardInterrupt traceback. The signal goes to the tool alone (as `kill` sends it)."""
    script = os.path.join(REPO, "benchmark", "time_to_score.py")
    command = [sys.executable, script, "--script", "ppo_atari_envpool", "--minutes", "3", "--poll-seconds", "1"]
    command += ["--runs-dir", str(tmp_path / "runs"), "--results-dir", str(tmp_path / "results")]
    command += ["--script-args=--num-envs 4 --num-steps 64 --torch-threads 1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    child, _ = first_training_child(process)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signum and "Traceback" not in stderr, stderr
    assert stderr.strip() == (
        f"{name}: benchmark/time_to_score.py stopped; ended the 1 run it had started; no record written; the run's "
        f"unfinished folder: {tmp_path / 'runs' / 'ppo_atari_envpool__Pong-v5__1'}"
    )
    assert not os.path.exists(f"/proc/{child}") and not (tmp_path / "results").exists()
