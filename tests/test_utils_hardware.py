"""cleanrl_utils.hardware: the precision, layout and thread choices for every machine kind (faked
capabilities: an AVX2 laptop, a Zen 4, an AMX Xeon, each under oneDNN ISA caps, a T4, a V100, an
A100, an H100), the explicit overrides, the thread count under a real load on the cores, and real
script runs that print and save what they resolved."""

import os
import re
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from cleanrl_utils.checkpoint import upgrade_saved_args
from cleanrl_utils.hardware import (
    Machine,
    TorchThreads,
    choose_speed_levers,
    resolve_channels_last,
    resolve_precision,
    this_machine,
    threads_for_free_cores,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

AVX2_LAPTOP = Machine("cpu")
ZEN4 = Machine("cpu", cpu_avx512_bf16=True)
AMX_XEON = Machine("cpu", cpu_avx512_bf16=True, cpu_amx=True)
T4, V100, A100, H100 = (Machine("cuda", cuda_capability=cc) for cc in ((7, 5), (7, 0), (8, 0), (9, 0)))


def capped(machine: Machine, isa: str) -> Machine:
    return Machine(machine.device_type, machine.cuda_capability, machine.cpu_avx512_bf16, machine.cpu_amx, isa)


@pytest.mark.parametrize(
    "machine, expected",
    [
        (AVX2_LAPTOP, "fp32"),
        (ZEN4, "bf16"),
        (AMX_XEON, "bf16"),
        (capped(ZEN4, "AVX2"), "fp32"),
        (capped(AMX_XEON, "AVX2"), "fp32"),
        (capped(ZEN4, "AVX512_CORE_VNNI"), "fp32"),
        (capped(ZEN4, "AVX512_CORE"), "fp32"),
        (capped(ZEN4, "AVX512_CORE_BF16"), "bf16"),
        (capped(AMX_XEON, "AVX10_1_512_AMX"), "bf16"),
        (capped(AMX_XEON, "AVX512_CORE_AMX"), "bf16"),
        (capped(ZEN4, "ALL"), "bf16"),
        (capped(ZEN4, "NOT_AN_ISA"), "fp32"),  # unknown cap: the safe choice
        (capped(AVX2_LAPTOP, "ALL"), "fp32"),  # a cap never adds instructions
        (T4, "fp32"),
        (V100, "fp32"),
        (A100, "bf16"),
        (H100, "bf16"),
    ],
)
def test_auto_precision_is_bf16_only_where_the_machine_computes_it_natively(machine, expected):
    choice = resolve_precision("auto", machine)
    assert choice.value == expected
    assert choice.reason.startswith("auto: ")


def test_the_reason_names_what_decided():
    assert "no native bf16" in resolve_precision("auto", AVX2_LAPTOP).reason
    assert "AVX512-BF16" in resolve_precision("auto", ZEN4).reason
    assert "AMX" in resolve_precision("auto", AMX_XEON).reason
    assert "ONEDNN_MAX_CPU_ISA=AVX2" in resolve_precision("auto", capped(ZEN4, "AVX2")).reason
    assert "7.5 < 8.0" in resolve_precision("auto", T4).reason
    assert "8.0 >= 8.0" in resolve_precision("auto", A100).reason


@pytest.mark.parametrize("machine", [AVX2_LAPTOP, ZEN4, AMX_XEON, T4, A100])
@pytest.mark.parametrize("requested", ["fp32", "bf16"])
def test_an_explicit_precision_is_kept_on_every_machine(machine, requested):
    choice = resolve_precision(requested, machine)
    assert choice.value == requested and choice.reason.startswith(f"--precision {requested}")
    slow_bf16 = requested == "bf16" and machine in (AVX2_LAPTOP, T4)
    assert ("warning" in choice.reason) == slow_bf16  # asked for bf16 where it is slow: said once, then obeyed


def test_a_resumed_precision_says_where_it_came_from():
    choice = resolve_precision("bf16", ZEN4, kept_from_checkpoint=True)
    assert choice.value == "bf16" and "kept from the checkpoint" in choice.reason


def test_bad_precision_values_are_refused():
    with pytest.raises(ValueError, match="auto, fp32 or bf16"):
        resolve_precision("fp16", ZEN4)
    with pytest.raises(ValueError, match="auto, on or off"):
        resolve_channels_last("yes", "fp32", ZEN4)


def test_the_xla_backend_stays_fp32_on_every_cpu_and_takes_bf16_on_ampere():
    for machine in (AVX2_LAPTOP, ZEN4, AMX_XEON):
        assert resolve_precision("auto", machine, backend="xla").value == "fp32"
    assert resolve_precision("auto", A100, backend="xla").value == "bf16"
    assert resolve_precision("auto", T4, backend="xla").value == "fp32"


def test_batch_32_replay_scripts_stay_fp32_on_every_gpu_and_keep_bf16_on_a_native_cpu():
    # DQN Atari on an H200: bf16 at 0.90x, then 0.94-0.97x of fp32's SPS (two sessions), so auto must not pick it there
    for machine in (T4, V100, A100, H100):
        choice = resolve_precision("auto", machine, bf16_pays_on_cuda=False)
        assert choice.value == "fp32" and "launch-bound" in choice.reason
    assert resolve_precision("auto", ZEN4, bf16_pays_on_cuda=False).value == "bf16"  # the CPU rule is unchanged
    assert resolve_precision("auto", AVX2_LAPTOP, bf16_pays_on_cuda=False).value == "fp32"
    assert resolve_precision("bf16", H100, bf16_pays_on_cuda=False).value == "bf16"  # asked for: obeyed
    for script in ("dqn_atari_envpool", "c51_atari_envpool", "rainbow_atari_envpool", "sac_atari_envpool"):
        with open(os.path.join(REPO, "cleanrl", f"{script}.py")) as file:
            call = r"choose_speed_levers\(\s*args, this_machine\(device\), checkpoint, bf16_pays_on_cuda=False"
            assert re.search(call, file.read()), script  # \s*: the call may be split over lines


@pytest.mark.parametrize(
    "requested, precision, machine, expected",
    [
        ("auto", "fp32", AVX2_LAPTOP, "on"),
        ("auto", "fp32", ZEN4, "on"),
        ("auto", "bf16", ZEN4, "off"),
        ("auto", "bf16", AMX_XEON, "off"),
        ("auto", "bf16", A100, "on"),
        ("auto", "fp32", T4, "on"),
        ("on", "bf16", ZEN4, "on"),
        ("off", "fp32", AVX2_LAPTOP, "off"),
    ],
)
def test_channels_last(requested, precision, machine, expected):
    assert resolve_channels_last(requested, precision, machine).value == expected


def test_rainbow_stays_in_the_default_layout_in_fp32_on_cpu_only():
    """Rainbow's fp32 CPU step ran 0.96x channels-last (3 interleaved runs each, AVX2): auto picks off there, and only
    there; an explicit on is obeyed; and the script asks for it, not c51 (1.07x channels-last in the same A/B)."""
    assert resolve_channels_last("auto", "fp32", AVX2_LAPTOP, pays_on_cpu=False).value == "off"
    assert resolve_channels_last("auto", "fp32", ZEN4, pays_on_cpu=False).value == "off"
    assert resolve_channels_last("auto", "bf16", ZEN4, pays_on_cpu=False).value == "off"
    assert resolve_channels_last("auto", "fp32", H100, pays_on_cpu=False).value == "on"  # cuDNN's NHWC
    assert resolve_channels_last("on", "fp32", AVX2_LAPTOP, pays_on_cpu=False).value == "on"
    for script, pays in (("rainbow_atari_envpool", False), ("c51_atari_envpool", True)):
        with open(os.path.join(REPO, "cleanrl", f"{script}.py")) as file:
            assert ("channels_last_pays_on_cpu=False" not in file.read()) == pays, script


def test_this_machine_sees_the_onednn_cap(monkeypatch):
    """/proc/cpuinfo cannot see ONEDNN_MAX_CPU_ISA; the resolution must."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")
    machine = this_machine(torch.device("cpu"))
    assert machine.onednn_isa_cap == "AVX2"
    assert resolve_precision("auto", machine).value == "fp32"
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX512_CORE")  # oneDNN's older name for the same cap
    assert this_machine(torch.device("cpu")).onednn_isa_cap == "AVX512_CORE"


@pytest.mark.parametrize(
    "cores, others_busy, expected",
    [(2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 1.0, 1), (2, 2.0, 1), (4, 1.0, 3), (4, 0.9, 3), (4, 3.5, 1), (1, 0.0, 1)],
)
def test_threads_for_free_cores(cores, others_busy, expected):
    assert threads_for_free_cores(cores, others_busy) == expected


def test_explicit_threads_and_omp_num_threads_are_fixed(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        threads = TorchThreads(3)
        assert (threads.count, torch.get_num_threads(), threads.reason) == (3, 3, "--torch-threads 3")
        assert threads.update() is None
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        threads = TorchThreads(0)
        assert (threads.count, threads.reason) == (1, "auto: OMP_NUM_THREADS=1")
    finally:
        torch.set_num_threads(before)


def spin_on_every_core() -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in os.sched_getaffinity(0)]


@pytest.mark.idle_cores
@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or not os.path.exists("/proc/stat"), reason="needs 2 cores and /proc/stat"
)
def test_auto_threads_follow_a_real_load_on_the_cores(monkeypatch):
    """Two busy processes on the cores: a run starting now takes one thread; when they stop, it takes every
    core again at its next check; when they start again, it drops back to one."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    cores = len(os.sched_getaffinity(0))
    busy = TorchThreads(0).count < cores
    torch.set_num_threads(before)
    if busy:
        pytest.skip("another process keeps a core busy: the quiet half of this test cannot hold")
    spinners = spin_on_every_core()
    try:
        time.sleep(0.5)
        threads = TorchThreads(0, every=0.5)
        assert threads.count == 1 and torch.get_num_threads() == 1, threads.reason
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        time.sleep(0.6)
        threads.update()  # this window still saw the spinners' last moments, or not: either way the next is quiet
        time.sleep(0.6)
        threads.update()
        if threads.count < cores and TorchThreads(0).count < cores:  # a process outside the test took a core meanwhile
            pytest.skip("another process started computing while the spinners were stopped: the quiet half cannot hold")
        assert threads.count == cores and torch.get_num_threads() == cores
        spinners = spin_on_every_core()
        time.sleep(0.6)
        assert threads.update() == 1 and torch.get_num_threads() == 1
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        torch.set_num_threads(before)


def test_choose_speed_levers_resolves_args_in_place_and_prints_each(capsys, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        args = SimpleNamespace(precision="auto", channels_last="auto", torch_threads=1)
        threads = choose_speed_levers(args, capped(ZEN4, "AVX2"))
        assert (args.precision, args.channels_last, threads.count) == ("fp32", "on", 1)
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith("precision: fp32 (auto: this CPU has AVX512-BF16, but ONEDNN_MAX_CPU_ISA=AVX2")
        assert lines[1].startswith("channels-last: on (auto:") and lines[2] == "torch threads: 1 (--torch-threads 1)"

        args = SimpleNamespace(precision="bf16", channels_last="off", torch_threads=1)  # as a checkpoint saved them
        choose_speed_levers(args, ZEN4, checkpoint={"args": {"precision": "bf16", "channels_last": "off"}})
        assert (
            capsys.readouterr().out.splitlines()[:2]
            == [
                "precision: bf16 (kept from the checkpoint; --precision auto re-chooses)",
                "channels-last: off (kept from the checkpoint; --channels-last auto re-chooses)",  # trial Q8: not "--channels-last off"
            ]
        )
        args = SimpleNamespace(precision="auto", torch_threads=1)  # no channels_last: an MLP script
        choose_speed_levers(args, A100)
        out = capsys.readouterr().out
        assert "precision: bf16" in out and "channels-last" not in out and "TF32" in out
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_num_threads(before)


def test_a_refused_resume_prints_no_lever_line_before_its_error(tmp_path, capsys):
    """Trial Q8: --resume of an older kept checkpoint of a run that went on is refused before any lever line."""
    older, newer = tmp_path / "checkpoint-000001000.pt", tmp_path / "checkpoint-000002000.pt"
    older.write_bytes(b"older")
    newer.write_bytes(b"newer")
    args = SimpleNamespace(precision="bf16", channels_last="off", torch_threads=1, resume=str(older))
    with pytest.raises(SystemExit) as error:
        choose_speed_levers(args, ZEN4, checkpoint={"args": {"precision": "bf16", "channels_last": "off"}})
    assert str(error.value).startswith(f"error: --resume {str(older)!r} is an older checkpoint of a run that went on")
    assert capsys.readouterr().out == ""


def test_old_saved_arguments_are_upgraded():
    saved = upgrade_saved_args({"bf16": True, "channels_last": True, "seed": 1})
    assert saved == {"precision": "bf16", "channels_last": "on", "seed": 1}
    assert upgrade_saved_args({"bf16": False, "channels_last": False}) == {"precision": "fp32", "channels_last": "off"}
    assert upgrade_saved_args({"precision": "fp32", "channels_last": "on"}) == {"precision": "fp32", "channels_last": "on"}


# ---- real runs: printed first, saved with the run, kept on resume ----

TINY_PPO = ["--env-id", "Pong-v5", "--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1"]


def run(script: str, *flags: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"} | (env or {})
    command = [sys.executable, os.path.join(REPO, "cleanrl", script), *flags]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def test_capped_ppo_atari_run_prints_fp32_first_and_saves_it_and_a_resume_keeps_it(tmp_path):
    capped_env = {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    flags = [*TINY_PPO, "--total-timesteps", "32", "--log-dir", str(tmp_path), "--save-model", "--torch-threads", "1"]
    result = run("ppo_atari_envpool.py", *flags, env=capped_env)
    lines = result.stdout.splitlines()
    # each machine kind's words: a Zen 4 EPYC, a Xeon with AMX (the suite at eb577d2 failed there), an AVX2-only CPU
    capped = "but ONEDNN_MAX_CPU_ISA=AVX2 keeps oneDNN below AVX512_CORE_BF16)"
    assert lines[0] in (
        f"precision: fp32 (auto: this CPU has AVX512-BF16, {capped}",
        f"precision: fp32 (auto: this CPU has AVX512-BF16 and AMX, {capped}",
        "precision: fp32 (auto: no native bf16 on this CPU (neither AVX512-BF16 nor AMX))",
    ), lines[0]
    assert lines[1] == "channels-last: on (auto: fp32 convolutions run faster channels-last on CPU)"
    (run_dir,) = [str(path) for path in tmp_path.iterdir()]
    saved = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["args"]
    model = torch.load(os.path.join(run_dir, "ppo_atari_envpool.cleanrl_model"), weights_only=True)["args"]
    assert saved["precision"] == model["precision"] == "fp32" and saved["channels_last"] == "on"

    # resumed without the cap and without --precision: the saved precision stays, and says so
    resumed = run("ppo_atari_envpool.py", "--resume", os.path.join(run_dir, "checkpoint.pt"), "--total-timesteps", "64")
    assert resumed.stdout.splitlines()[0] == "precision: fp32 (kept from the checkpoint; --precision auto re-chooses)"
    # trial Q8: the layout came from the checkpoint too, not from a --channels-last the command never passed
    assert resumed.stdout.splitlines()[1] == "channels-last: on (kept from the checkpoint; --channels-last auto re-chooses)"
    # --precision auto on resume chooses again, for the machine that resumes
    again = run("ppo_atari_envpool.py", "--resume", os.path.join(run_dir, "checkpoint.pt"), "--total-timesteps", "96",
                "--precision", "auto", env=capped_env)  # fmt: skip
    assert again.stdout.splitlines()[0].startswith("precision: fp32 (auto: ")
    # trial Q8: a resume refused as an older kept checkpoint prints its error line only, no lever line before it
    older = os.path.join(run_dir, "checkpoint-000000016.pt")
    shutil.copyfile(os.path.join(run_dir, "checkpoint.pt"), older)
    open(os.path.join(run_dir, "checkpoint-000999999.pt"), "wb").close()  # a newer kept checkpoint: the run went on
    command = [sys.executable, os.path.join(REPO, "cleanrl", "ppo_atari_envpool.py"), "--resume", older]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert refused.returncode != 0 and refused.stdout == "", refused.stdout
    assert refused.stderr.startswith(f"error: --resume {older!r} is an older checkpoint"), refused.stderr[-2000:]


def test_capped_dqn_atari_run_resolves_fp32_and_says_so(tmp_path):
    flags = ["--total-timesteps", "40", "--learning-starts", "20", "--buffer-size", "100", "--num-envs", "2"]
    result = run("dqn_atari_envpool.py", *flags, "--log-dir", str(tmp_path), env={"ONEDNN_MAX_CPU_ISA": "AVX2"})
    first = result.stdout.splitlines()[0]
    assert first.startswith("precision: fp32 (auto: ") and ("ONEDNN_MAX_CPU_ISA=AVX2" in first or "no native bf16" in first)
    assert "torch threads: " in result.stdout


def test_explicit_bf16_on_xla_cpu_blames_xla_not_the_cpu():
    """Trial 8, S2: the JAX twins' --precision bf16 warning said "no native bf16 on this CPU (neither AVX512-BF16 nor
    AMX)" on a CPU with AVX512-BF16: JAX's machine carries no CPU flags. The reason is XLA's CPU backend."""
    for flags in (dict(cpu_avx512_bf16=True), dict()):
        choice = resolve_precision("bf16", Machine(device_type="cpu", **flags), backend="xla")
        assert choice.value == "bf16"
        assert "XLA's CPU backend has no native bf16 convolutions" in choice.reason and "AVX512" not in choice.reason


# Runs SCRIPT ARGS... as __main__ with TorchThreads.update counted, and prints the count as the last line
COUNTED_THREAD_CHECKS = """
import runpy, sys
from cleanrl_utils import hardware
calls, update = [0], hardware.TorchThreads.update
def counted(self):
    calls[0] += 1
    return update(self)
hardware.TorchThreads.update = counted
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print(f"thread checks: {calls[0]}", flush=True)
"""


@pytest.mark.parametrize(
    "script",
    ["dqn", "c51", "dqn_atari_envpool", "c51_atari_envpool", "rainbow_atari_envpool", "sac_atari_envpool",
     "sac_continuous_action_envpool", "td3_continuous_action_envpool", "ddpg_continuous_action_envpool"],
)  # fmt: skip
def test_replay_scripts_look_at_the_load_every_iteration_not_only_when_they_log(tmp_path, script):
    """TorchThreads re-measures the load when `update()` is called and 5 s have passed. The replay scripts log every
    1,000 steps; a check made only then comes minutes apart on crowded cores (two discrete-SAC runs started together
    on the 2-core Xeon stayed at 2 threads each, at 2 SPS, for the 1,000 learning steps before their first log). Each
    of the 300 iterations here must call it."""
    from helpers import run_python

    steps = 300
    flags = ["--total-timesteps", str(steps), "--learning-starts", "200", "--buffer-size", "1000", "--batch-size", "32"]
    result = run_python(["-c", COUNTED_THREAD_CHECKS, os.path.join(REPO, "cleanrl", f"{script}.py"), *flags,
                         "--log-dir", str(tmp_path)])  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == f"thread checks: {steps}"
