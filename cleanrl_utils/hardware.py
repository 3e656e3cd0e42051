"""Speed levers whose best value depends on the machine a run is on: the network precision, the
convolution memory layout, torch's thread count and CUDA's matmul mode. Each is chosen at start-up
from what the machine can do (`--precision auto` and friends), printed in the run's first lines with
the reason, and the precision and layout are written into the run's saved arguments, so another
machine can repeat the run with the explicit value.

How "native bf16" is decided, and why not by timing the network at start-up: a calibration takes
seconds, and its answer flips with whatever else runs on the cores at that moment (exactly the
shared-core case that matters), so two starts of the same command could train at different
precisions. The machine's capability is deterministic and is what decides the 6-14x: without
bf16 dot-product instructions (AVX512-BF16 or AMX on x86, compute capability 8.0+ on CUDA), oneDNN
and cuBLAS fall back to reference or emulated kernels. On x86 the CPU flags come from PyTorch's own
cpuinfo, and the oneDNN ISA cap (`ONEDNN_MAX_CPU_ISA`, which /proc/cpuinfo cannot see) is applied on
top: a cap below AVX512_CORE_BF16 makes oneDNN compute like a CPU without bf16, so auto picks fp32.
"""

import os
import time
from dataclasses import dataclass

# oneDNN's ISA names in increasing order (its "CPU dispatcher control" documentation; the older
# AVX512_CORE_FP16 / AVX512_CORE_AMX* spellings sit beside their AVX10 names).
ONEDNN_ISAS = (
    "SSE41",
    "AVX",
    "AVX2",
    "AVX2_VNNI",
    "AVX2_VNNI_2",
    "AVX512_CORE",
    "AVX512_CORE_VNNI",
    "AVX512_CORE_BF16",
    "AVX10_1_512",
    "AVX512_CORE_FP16",
    "AVX10_1_512_AMX",
    "AVX512_CORE_AMX",
    "AVX10_1_512_AMX_FP16",
    "AVX512_CORE_AMX_FP16",
    "AVX10_2_512",
    "AVX10_2_512_AMX_2",
    "ALL",
    "DEFAULT",
)
FIRST_BF16_ISA = ONEDNN_ISAS.index("AVX512_CORE_BF16")


@dataclass(frozen=True)
class Machine:
    """What the speed choices need to know about the machine. `this_machine` reads the real one;
    tests build fake ones (an AVX2 laptop, a T4, an A100) to check every rule."""

    device_type: str  # "cpu" or "cuda"
    cuda_capability: tuple[int, int] | None = None  # (major, minor) of the CUDA device
    cpu_avx512_bf16: bool = False
    cpu_amx: bool = False
    onednn_isa_cap: str | None = None  # ONEDNN_MAX_CPU_ISA (or its older name DNNL_MAX_CPU_ISA), upper case


@dataclass(frozen=True)
class Choice:
    """A resolved lever: its value and the reason printed beside it."""

    value: str
    reason: str


def this_machine(device) -> Machine:
    """The machine the torch `device` is on."""
    import torch

    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
    cpu = torch.cpu
    return Machine(
        device_type=device.type,
        cuda_capability=torch.cuda.get_device_capability(device) if device.type == "cuda" else None,
        cpu_avx512_bf16=bool(getattr(cpu, "_is_avx512_bf16_supported", lambda: False)()),
        cpu_amx=bool(getattr(cpu, "_is_amx_tile_supported", lambda: False)()),
        onednn_isa_cap=cap.strip().upper() if cap else None,
    )


def jax_machine() -> Machine:
    """The machine JAX's default device is on: a GPU with its compute capability, else the CPU."""
    import jax

    device = jax.devices()[0]
    if device.platform == "gpu":
        capability = str(getattr(device, "compute_capability", "0.0")).split(".")
        return Machine(
            device_type="cuda", cuda_capability=(int(capability[0]), int(capability[1]) if len(capability) > 1 else 0)
        )
    return Machine(device_type=device.platform)


def native_bf16(machine: Machine) -> tuple[bool, str]:
    """Whether the machine multiplies bf16 natively, and why (or why not)."""
    if machine.device_type == "cuda":
        major, minor = machine.cuda_capability or (0, 0)
        has = (major, minor) >= (8, 0)
        return has, f"CUDA compute capability {major}.{minor} {'>=' if has else '<'} 8.0"
    if machine.device_type != "cpu":
        return False, f"no bf16 rule for device {machine.device_type!r}"
    if not (machine.cpu_avx512_bf16 or machine.cpu_amx):
        return False, "no native bf16 on this CPU (neither AVX512-BF16 nor AMX)"
    flags = " and ".join(name for name, has in (("AVX512-BF16", machine.cpu_avx512_bf16), ("AMX", machine.cpu_amx)) if has)
    cap = machine.onednn_isa_cap
    if cap is not None and cap not in ONEDNN_ISAS:
        return False, f"this CPU has {flags}, but ONEDNN_MAX_CPU_ISA={cap} is not an ISA oneDNN names"
    if cap is not None and ONEDNN_ISAS.index(cap) < FIRST_BF16_ISA:
        return False, f"this CPU has {flags}, but ONEDNN_MAX_CPU_ISA={cap} keeps oneDNN below AVX512_CORE_BF16"
    return True, f"this CPU has {flags}"


def resolve_precision(
    requested: str,
    machine: Machine,
    kept_from_checkpoint: bool = False,
    backend: str = "torch",
    bf16_pays_on_cuda: bool = True,
) -> Choice:
    """`--precision auto|fp32|bf16` -> "fp32" or "bf16". auto: bf16 only where the machine computes
    it natively, else fp32. `backend="xla"` (the JAX twins): XLA's CPU backend has no bf16
    convolution path (measured slower than fp32 on every CPU tried), so auto is fp32 on CPU there.
    `bf16_pays_on_cuda=False` (the scripts whose updates are a replay batch of 32): on a GPU each such update is a
    handful of tiny kernels, bound by their launches, and autocast's casts only add kernels, so auto is fp32 on CUDA
    (DQN Atari on an H200: bf16 at 0.90x, then 0.94-0.97x of fp32's SPS, two sessions)."""
    if requested in ("fp32", "bf16"):
        source = (
            "kept from the checkpoint; --precision auto re-chooses" if kept_from_checkpoint else f"--precision {requested}"
        )
        reason = source
        if requested == "bf16":
            has, why = native_bf16(machine)
            if backend == "xla" and machine.device_type == "cpu":  # the CPU's flags do not matter to XLA's convolutions
                has, why = False, "XLA's CPU backend has no native bf16 convolutions"
            if not has:
                reason = f"{source}; warning: {why}, bf16 runs several times slower than fp32 here"
        return Choice(requested, reason)
    if requested != "auto":
        raise ValueError(f"--precision must be auto, fp32 or bf16, got {requested!r}")
    if backend == "xla" and machine.device_type == "cpu":
        return Choice("fp32", "auto: XLA's CPU backend has no native bf16 convolutions")
    if machine.device_type == "cuda" and not bf16_pays_on_cuda:
        return Choice("fp32", "auto: batch-32 updates are launch-bound on a GPU, where bf16's casts only add kernels")
    has, why = native_bf16(machine)
    return Choice("bf16" if has else "fp32", f"auto: {why}")


def resolve_channels_last(
    requested: str, precision: str, machine: Machine, kept_from_checkpoint: bool = False, pays_on_cpu: bool = True
) -> Choice:
    """`--channels-last auto|on|off` for the convolutions. auto: on in fp32 and on CUDA, off for bf16
    on CPU. Measured on a 2-core EPYC Zen 4 (one PPO update of the Nature CNN, minibatch 256):
    fp32 runs 1.2-1.6x faster channels-last, with or without ONEDNN_MAX_CPU_ISA=AVX2; bf16 runs
    faster in the default layout (the whole Pong run 538-573 against 480-548 SPS). `kept_from_checkpoint`: the
    value is a resumed run's saved one, and the reason says so (not a --channels-last the command never passed).
    `pays_on_cpu=False`: a script whose whole fp32 step measured slower channels-last on CPU (Rainbow: 52.0 against
    54.3 SPS, three interleaved runs each under ONEDNN_MAX_CPU_ISA=AVX2, benchmark/lever_ab.py) stays in the default
    layout there: its convolutions are a smaller share of a step than the layout conversions around them."""
    if requested in ("on", "off"):
        if kept_from_checkpoint:
            return Choice(requested, "kept from the checkpoint; --channels-last auto re-chooses")
        return Choice(requested, f"--channels-last {requested}")
    if requested != "auto":
        raise ValueError(f"--channels-last must be auto, on or off, got {requested!r}")
    if machine.device_type == "cuda":
        return Choice("on", "auto: cuDNN's NHWC convolutions")
    if precision == "fp32" and not pays_on_cpu:
        return Choice("off", "auto: this script's fp32 step measured slower channels-last on CPU")
    if precision == "fp32":
        return Choice("on", "auto: fp32 convolutions run faster channels-last on CPU")
    return Choice("off", "auto: bf16 convolutions run faster in the default layout on CPU")


def use_tf32_matmuls(machine: Machine) -> str | None:
    """On CUDA with compute capability >= 8.0, let fp32 matmuls and convolutions use TF32 tensor
    cores (10-bit mantissa inputs, fp32 accumulation: what PyTorch's AMP recipes assume for RL-sized
    networks). Returns the line to print, or None where nothing changes."""
    if machine.device_type != "cuda" or (machine.cuda_capability or (0, 0)) < (8, 0):
        return None
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return "fp32 matmuls: TF32 (CUDA compute capability >= 8.0)"


# ---- torch threads ----


def threads_for_free_cores(cores: int, others_busy: float) -> int:
    """Threads to use on `cores` cores of which other processes keep `others_busy` cores busy (a mean
    over the last few seconds), rounded to the nearest core: an OpenMP region waits at its barrier
    for its slowest thread, so one thread that shares its core with another busy process slows every
    parallel region of the run (measured: two runs of 2 threads each on 2 cores made 29 SPS each,
    against 523 each with 1 thread), while a light background (a shell, a logger) is not worth a core."""
    taken = max(0, int(others_busy + 0.5))
    return max(1, cores - taken)


def _busy_seconds(cpus: set[int], count_nice: bool) -> float | None:
    """Seconds the given CPUs spent busy since boot (/proc/stat; None where there is none)."""
    try:
        with open("/proc/stat") as f:
            lines = f.readlines()
    except OSError:
        return None
    ticks, found = 0, False
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
        ticks += user + system + irq + softirq + steal + (nice if count_nice else 0)
        found = True
    return ticks / os.sysconf("SC_CLK_TCK") if found else None


class TorchThreads:
    """torch's intra-op thread count for a run. `--torch-threads N` fixes N. 0 (auto) takes
    OMP_NUM_THREADS where set (the sweep runner sets it to cores / concurrent runs), else the cores
    this process may use that no other process keeps busy, re-measured every `every` seconds while
    the run goes: a run started alone uses every core, and drops to fewer as soon as another training
    or a notebook starts computing beside it (and back when it ends). Processes with a higher nice
    value than this one are not counted: the scheduler lets them wait. Call `update()` once per
    iteration; it costs one read of /proc/stat."""

    def __init__(self, requested: int, every: float = 5.0):
        import torch

        self.cpus = os.sched_getaffinity(0)
        self.every = every
        self.adaptive = False
        omp = os.environ.get("OMP_NUM_THREADS", "")
        if requested > 0:
            self.count, self.reason = requested, f"--torch-threads {requested}"
        elif omp.isdigit() and int(omp) > 0:
            self.count, self.reason = int(omp), f"auto: OMP_NUM_THREADS={omp}"
        else:
            self.adaptive = True
            self.count_nice = os.getpriority(os.PRIO_PROCESS, 0) > 0  # niced ourselves: niced peers compete
            self._last = self._sample()
            others = 0.0
            if self._last is not None:  # a first look at the load, over a fifth of a second
                time.sleep(0.2)
                others = self._others_busy()
            self.count = threads_for_free_cores(len(self.cpus), others)
            self.reason = (
                f"auto: {self.count} of {len(self.cpus)} cores free, re-checked every {every:g} s"
                if self._last is not None
                else f"auto: {len(self.cpus)} cores (no /proc/stat to watch the load)"
            )
        torch.set_num_threads(self.count)

    def _sample(self) -> tuple[float, float, float] | None:
        busy = _busy_seconds(self.cpus, self.count_nice)
        if busy is None:
            return None
        own = os.times()
        return time.monotonic(), busy, own.user + own.system

    def _others_busy(self) -> float:
        """Cores other processes kept busy since the last sample; starts a new sample."""
        now = self._sample()
        (t0, busy0, own0), (t1, busy1, own1) = self._last, now
        self._last = now
        return max(0.0, ((busy1 - busy0) - (own1 - own0)) / max(t1 - t0, 1e-3))

    def update(self) -> int | None:
        """Re-measure when due; returns the new count when it changed (and sets it), else None."""
        if not self.adaptive or self._last is None or time.monotonic() - self._last[0] < self.every:
            return None
        count = threads_for_free_cores(len(self.cpus), self._others_busy())
        if count == self.count:
            return None
        import torch

        torch.set_num_threads(count)
        self.count = count
        return count


def choose_speed_levers(
    args,
    machine: Machine,
    checkpoint: dict | None = None,
    backend: str = "torch",
    bf16_pays_on_cuda: bool = True,
    channels_last_pays_on_cpu: bool = True,
) -> TorchThreads | None:
    """Resolves the script's speed flags for `machine` and prints one line each, `name: value (reason)`:
    `args.precision` and `args.channels_last` (where the script has them) are replaced in place by
    their resolved values, so the run's saved arguments and hyperparameters hold what ran and another
    machine can repeat it; a resumed run keeps its checkpoint's values unless the command passes
    others. Sets torch's threads (returns them, for `update()` once per iteration; None with
    `backend="xla"`) and TF32 matmuls on CUDA >= 8.0. `bf16_pays_on_cuda=False`: see `resolve_precision`;
    `channels_last_pays_on_cpu=False`: see `resolve_channels_last`.

    A resume that run_folder would refuse (a folder it cannot write to, an older kept checkpoint of a run that went
    on) is refused here first, so a refused resume prints its error line only, not these lines before it."""
    saved = (checkpoint or {}).get("args", {})
    if checkpoint is not None and getattr(args, "resume", None):
        from cleanrl_utils.run import check_resumable_dir, check_resumes_the_latest

        run_dir = os.path.dirname(os.path.abspath(args.resume))
        check_resumable_dir(run_dir, args.resume)
        check_resumes_the_latest(run_dir, args.resume, checkpoint.get("global_step"))
    precision = None
    if hasattr(args, "precision"):
        kept = args.precision == saved.get("precision")
        precision = resolve_precision(
            args.precision, machine, kept_from_checkpoint=kept, backend=backend, bf16_pays_on_cuda=bf16_pays_on_cuda
        )
        args.precision = precision.value
        print(f"precision: {precision.value} ({precision.reason})", flush=True)
    if hasattr(args, "channels_last"):
        kept = args.channels_last == saved.get("channels_last")
        precision_value = precision.value if precision else "fp32"
        layout = resolve_channels_last(
            args.channels_last, precision_value, machine, kept, pays_on_cpu=channels_last_pays_on_cpu
        )
        args.channels_last = layout.value
        print(f"channels-last: {layout.value} ({layout.reason})", flush=True)
    if backend == "xla":
        return None
    threads = TorchThreads(args.torch_threads)
    print(f"torch threads: {threads.count} ({threads.reason})", flush=True)
    if tf32 := use_tf32_matmuls(machine):
        print(tf32, flush=True)
    return threads
