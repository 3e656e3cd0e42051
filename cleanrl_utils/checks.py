"""Argument checks every script repeats. Each exits with one line, `error: ...`, that names the bad
value and what is allowed: a user mistake never ends in a traceback, and nothing has been written yet."""

import difflib
import functools
import math
import os
import sys
import warnings
from typing import Callable

# EnvPool takes int32 seeds (numpy's global seed is a uint32): one range for every script, the smaller.
MAX_SEED = 2**31 - 1
MAX_EPISODE_STEPS = 2**30  # under EnvPool's int32 step count, with room for the one step make_envpool adds
# A run's budget in env steps: 10^12 is about 30 years at 1M steps a second; past int64 (2^63) numpy's counters and
# torch's step tensors overflow (trial 15, S6: 2^63 and 10^20 were accepted and trained); results refuses past it too
MAX_BUDGET = 10**12
FLOAT32_EPS = 2.0**-23
SUPPORT_BOUND = 1e6  # a C51 support's ends: returns in reward units, far past any game's, and far from float32's limit


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_positive(args, *names: str) -> None:
    """Each named field is > 0 and finite (integers: "a positive integer"). NaN fails every comparison, so
    `value <= 0` alone would let it through: a NaN rate or KL bound trains nothing and still exits 0."""
    for name in names:
        value = getattr(args, name, None)  # a flag this script does not have is not checked
        if value is None:
            continue
        if isinstance(value, int) and value <= 0:
            sys.exit(f"error: {flag(name)} must be a positive integer, got {value}")
        if not isinstance(value, int) and not (value > 0 and math.isfinite(value)):
            sys.exit(f"error: {flag(name)} must be positive and finite, got {value}")


def check_non_negative(args, *names: str) -> None:
    """Each named field is >= 0 and finite (a noise scale or a clip, where 0 turns it off)."""
    for name in names:
        value = getattr(args, name, None)
        if value is not None and not (value >= 0 and math.isfinite(value)):
            sys.exit(f"error: {flag(name)} must be >= 0 and finite (0 = off), got {value}")


def check_run_args(args) -> None:
    """The flags every script has: seed, learning rate, discounting, checkpoint and video intervals,
    threads; every float flag is finite; and the loss coefficients of the scripts that have them have a sign
    the loss can use (a negative clip range or gradient-norm bound, or a negative value weight, trains on
    and exits 0)."""
    for name, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            sys.exit(f"error: {flag(name)} must be a finite number, got {value}")
    # an empty --resume (an unset shell variable: --resume "$CKPT") is not "no resume": the run folder taken from it
    # was the current folder's parent, and a fresh run overwrote the checkpoint.pt there (trial 17, U2)
    if getattr(args, "resume", None) is not None and not args.resume.strip():
        sys.exit(f"error: --resume {args.resume!r} is empty: name a checkpoint file, or leave --resume out for a fresh run")
    check_positive(args, "clip_coef", "max_grad_norm", "target_kl")  # target_kl: None = no early stop
    check_non_negative(args, "ent_coef", "vf_coef")
    if not 0 <= args.seed <= MAX_SEED:
        sys.exit(
            f"error: --seed must be in 0..{MAX_SEED} (seeds are 32-bit signed integers in every script here), got {args.seed}"
        )
    check_positive(args, "total_timesteps", "learning_rate", "video_every")
    if args.total_timesteps > MAX_BUDGET:
        sys.exit(f"error: --total-timesteps must be at most {MAX_BUDGET:,} (10^12 env steps), got {args.total_timesteps}")
    if not 0 < args.gamma <= 1:
        sys.exit(f"error: --gamma must be in (0, 1], got {args.gamma}")
    if hasattr(args, "gae_lambda") and not 0 <= args.gae_lambda <= 1:  # only the scripts that have the flag
        sys.exit(f"error: --gae-lambda must be in [0, 1], got {args.gae_lambda}")
    check_support(args)
    if args.checkpoint_every < 0:
        sys.exit(f"error: --checkpoint-every must be >= 0 (0 = only at Ctrl-C and at the end), got {args.checkpoint_every}")
    # EnvPool counts an episode's steps in 32-bit integers (trial 14: 2^31 - 1 gave a TypeError from envpool.make)
    if (limit := getattr(args, "max_episode_steps", None)) is not None and limit > MAX_EPISODE_STEPS:
        sys.exit(
            f"error: --max-episode-steps must be at most {MAX_EPISODE_STEPS:,} (episode steps are counted in 32 bits), "
            f"got {limit}"
        )
    check_torch_threads(getattr(args, "torch_threads", 0))
    if getattr(args, "capture_video", False) and "envpool" in sys.modules:  # an EnvPool MuJoCo run films in Gymnasium
        from envpool.registration import registry

        if registry.specs.get(args.env_id, ("",))[0] == "envpool.mujoco.gym":
            from cleanrl_utils.video import check_gymnasium_films

            check_gymnasium_films(args.env_id)
    # a JAX script (flax: EnvPool itself imports jax): XLA's compiler aborts in C++ under a tighter limit, no line
    if "flax" in sys.modules:
        from cleanrl_utils.stop import check_address_space

        check_address_space(JAX_TRAINING_ADDRESS_SPACE, "a JAX training script")


# The smallest address-space limit (`ulimit -v`) the JAX training scripts ran under (AMD EPYC, JAX on CPU, 2 cores:
# ppo_atari_envpool_xla_jax at 2.9 GiB; at 2.4 GiB XLA aborted with std::bad_alloc, exit 134, an empty run folder left).
JAX_TRAINING_ADDRESS_SPACE = 3_000_000 * 1024


# Fields of the speed baselines that are fractions, by name: a discount, a lambda, an epsilon, a PER exponent; and
# those in (0, 1]: a Polyak rate of 0 never moves the target, a schedule fraction of 0 divides by 0.
BASELINE_FRACTIONS = ("gamma", "gae_lambda", "q_lambda", "start_e", "end_e", "prioritized_replay_beta")
BASELINE_OPEN_FRACTIONS = ("tau", "exploration_fraction")


# The most atoms a support may have (C51's paper: 51; CleanRL's classic scripts: 101); trial 17, U5: 10^8 in a speed
# baseline asked for 800 GB.
MAX_ATOMS = 10_000


def check_support(args) -> None:
    """The distributional scripts' support (C51, Rainbow, and their speed baselines; others have no --v-min): 2 to
    MAX_ATOMS atoms, ends within reach of float32 arithmetic, atoms far enough apart for float32 at that scale."""
    if not hasattr(args, "v_min"):
        return
    if not 2 <= args.n_atoms <= MAX_ATOMS:  # 2: the support's two ends; the paper's 51, CleanRL's classic 101
        sys.exit(f"error: --n-atoms must be in [2, {MAX_ATOMS}], got {args.n_atoms}")
    # ends within reach of float32 arithmetic (trial 13, Q5: +-3e38 made the width inf, and the projection indexed
    # atom -2^63 in a traceback)
    if not -SUPPORT_BOUND <= args.v_min < args.v_max <= SUPPORT_BOUND:
        sys.exit(
            f"error: --v-min {args.v_min} and --v-max {args.v_max} must hold -{SUPPORT_BOUND:,.0f} <= v-min < v-max <= "
            f"{SUPPORT_BOUND:,.0f} (the support's two ends, in return units)"
        )
    # atoms too close for float32 at the support's scale collapse (trial 14: [0, 1e-45] learnt nothing and exited 0;
    # [5, 5.0000001] indexed atom -2^63 in the projection). The projection reads a return's place on the support to
    # within one float32 step at that scale, so atoms at least 100 steps apart are placed to 1% of their spacing
    step = FLOAT32_EPS * max(1.0, abs(args.v_min), abs(args.v_max))
    spacing, least = (args.v_max - args.v_min) / (args.n_atoms - 1), 100 * step
    if spacing < least:
        sys.exit(
            f"error: --v-min {args.v_min}, --v-max {args.v_max} and --n-atoms {args.n_atoms} put the atoms "
            f"{spacing:.3g} apart, too close for float32 at this scale (one float32 step at max(1, |v-min|, "
            f"|v-max|) is {step:.3g}; the atoms must be at least 100 steps, {least:.3g}, apart): widen the support "
            "or use fewer atoms"
        )


def check_baseline_args(args, positive: tuple[str, ...], non_negative: tuple[str, ...] = ()) -> None:
    """The speed baselines in benchmark/ (CleanRL's loops, `*_cleanrl_layout.py`) take bad input as the scripts do,
    in one line before anything runs (trials 14 and 15: NaN, 0, a gamma of 2 and a reversed support gave tracebacks
    or ran and exited 0): every float finite, the named fields positive or >= 0, the fractions among
    BASELINE_FRACTIONS in [0, 1] and BASELINE_OPEN_FRACTIONS in (0, 1], a batch no larger than the replay, a
    support's ends in order, the log folder writable."""
    for name, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            sys.exit(f"error: {flag(name)} must be a finite number, got {value}")
    check_positive(args, *positive)
    check_non_negative(args, *non_negative)
    if args.total_timesteps > MAX_BUDGET:
        sys.exit(f"error: --total-timesteps must be at most {MAX_BUDGET:,} (10^12 env steps), got {args.total_timesteps}")
    for name in (name for name in BASELINE_FRACTIONS if hasattr(args, name)):
        if not 0 <= getattr(args, name) <= 1:
            sys.exit(f"error: {flag(name)} must be in [0, 1], got {getattr(args, name)}")
    for name in (name for name in BASELINE_OPEN_FRACTIONS if hasattr(args, name)):
        if not 0 < getattr(args, name) <= 1:
            sys.exit(f"error: {flag(name)} must be in (0, 1], got {getattr(args, name)}")
    if hasattr(args, "buffer_size") and args.batch_size > args.buffer_size:  # as the scripts refuse it
        sys.exit(f"error: --batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}")
    check_support(args)  # trial 17, U5: --n-atoms 1 and 10^8 were tracebacks, a support 1e-6 wide trained
    from cleanrl_utils.run import check_writable_dir

    check_writable_dir(args.log_dir, "--log-dir", keep=False)  # made when the run starts: a refusal leaves none


def check_log_std_init(value: float, flag: str) -> None:
    """A Gaussian policy's starting log std: std from 4.5e-5 to 148; beyond, exp() leaves float32's useful range (trial
    31: --init-logstd 1e12 diverged at the first update, and the divergence line blamed --learning-rate)."""
    if not -10 <= value <= 5:
        sys.exit(f"error: {flag} must be in [-10, 5], got {value}")


def check_torch_threads(value: int) -> None:
    """0 (auto) up to 4 threads per core this process may use. Far past that, OpenMP fails to start its threads:
    `--torch-threads 100000` ended in a segmentation fault with no line, or in a traceback from EnvPool."""
    cores = len(os.sched_getaffinity(0))
    if not 0 <= value <= 4 * cores:
        sys.exit(
            f"error: --torch-threads must be in 0..{4 * cores} (0 = auto; at most 4 per core, and this machine gives "
            f"{cores}: past the cores, threads only wait for one another), got {value}"
        )
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if value == 0 and omp.isdigit() and int(omp) > 4 * cores:  # auto takes OMP_NUM_THREADS as it is: the same bound
        sys.exit(
            f"error: OMP_NUM_THREADS={omp} (which --torch-threads 0, auto, follows) must be at most {4 * cores}, 4 per "
            f"core of this machine's {cores}; lower or unset it, or pass --torch-threads"
        )


def check_rollout_shape(
    num_envs: int, num_steps: int, num_minibatches: int, update_epochs: int, total_timesteps: int, envs_flag: str = "num_envs"
) -> None:
    """Positive sizes; the minibatches split the rollout evenly, two rows at least (the advantage
    normalisation needs a standard deviation); one rollout fits in --total-timesteps. `envs_flag`: the script's
    name for its env count (one process's, under torch.distributed)."""
    for name, value in (
        (envs_flag, num_envs),
        ("num_steps", num_steps),
        ("num_minibatches", num_minibatches),
        ("update_epochs", update_epochs),
    ):
        if value <= 0:
            sys.exit(f"error: {flag(name)} must be a positive integer, got {value}")
    batch_size = num_envs * num_steps
    if batch_size % num_minibatches != 0:
        sys.exit(
            f"error: --num-minibatches {num_minibatches} does not divide the batch size "
            f"{batch_size} (= {flag(envs_flag)} {num_envs} x --num-steps {num_steps})"
        )
    if batch_size // num_minibatches < 2:
        sys.exit(
            f"error: --num-minibatches {num_minibatches} leaves {batch_size // num_minibatches} row per minibatch "
            f"(batch size {batch_size}); a minibatch needs at least 2 rows"
        )
    if batch_size > total_timesteps:
        sys.exit(f"error: --total-timesteps {total_timesteps} is smaller than one rollout ({batch_size} steps)")


def check_replay_args(args, min_per_env: int = 1, resumed: bool = False, per_env_why: str = "") -> None:
    """The flags of every replay-buffer script: positive sizes, at least `min_per_env` transitions per env (what
    makes that number: `per_env_why`), a batch no larger than the buffer, one step of every env in
    --total-timesteps, --learning-starts before the end (else the run never trains; a `resumed` run may end
    anywhere, it may have trained already), --tau in (0, 1] where the script has one."""
    check_positive(args, "num_envs", "buffer_size", "batch_size")
    if args.batch_size > args.buffer_size:
        sys.exit(f"error: --batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}")
    if args.buffer_size // args.num_envs < min_per_env:
        sys.exit(
            f"error: --buffer-size {args.buffer_size} leaves fewer than {min_per_env} transitions per env "
            f"({per_env_why + '; ' if per_env_why else ''}--num-envs {args.num_envs}): "
            f"set --buffer-size >= {min_per_env * args.num_envs}"
        )
    if args.total_timesteps < args.num_envs:
        sys.exit(f"error: --total-timesteps {args.total_timesteps} is less than one step of --num-envs {args.num_envs} envs")
    if args.learning_starts < 0 or (args.learning_starts >= args.total_timesteps and not resumed):
        sys.exit(
            f"error: --learning-starts {args.learning_starts} must be in [0, --total-timesteps {args.total_timesteps}) "
            "(else the run never trains)"
        )
    if hasattr(args, "tau") and not 0 < args.tau <= 1:  # (C51 copies its target network: no --tau)
        sys.exit(f"error: --tau must be in (0, 1] (1 = copy the weights), got {args.tau}")


def check_epsilon_schedule(args) -> None:
    """--start-e and --end-e are probabilities, epsilon decays (end <= start), --exploration-fraction in (0, 1]."""
    for name in ("start_e", "end_e"):
        if not 0 <= getattr(args, name) <= 1:
            sys.exit(f"error: {flag(name)} must be in [0, 1] (a probability), got {getattr(args, name)}")
    if args.end_e > args.start_e:
        sys.exit(f"error: --end-e {args.end_e} must be <= --start-e {args.start_e} (epsilon decays from start to end)")
    if not 0 < args.exploration_fraction <= 1:
        sys.exit(f"error: --exploration-fraction must be in (0, 1], got {args.exploration_fraction}")


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux); elsewhere the physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def address_space_room() -> int | None:
    """Bytes this process may still map under its address-space limit (`ulimit -v`), or None where it has none."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status") as f:
            mapped = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        mapped = 0
    return max(0, soft - mapped)


def check_memory(bytes_needed: int, what: str, flags: str, held: int = 0) -> None:
    """Refuse up front, with one line, a buffer larger than the memory this machine has free, or than this process
    may still map under `ulimit -v` (trial 29: 30,000 EnvPool envs passed against the free memory, then EnvPool's
    std::bad_alloc aborted the run under the limit, no line, an empty run folder left). `held`: bytes of it this
    process holds already (a resumed run's loaded buffer, which the new one takes over), not counted again."""
    available, where = available_memory_bytes(), "of memory available"
    room = address_space_room()
    if room is not None and room < available:
        available, where = room, "this process may still map (ulimit -v)"
    if bytes_needed - held > available:
        loaded = f" ({held / 2**30:,.1f} GiB of it loaded already)" if held else ""
        sys.exit(
            f"error: {what} needs {bytes_needed / 2**30:,.1f} GiB{loaded}, more than the {available / 2**30:,.1f} GiB "
            f"{where}; lower {flags}"
        )


def check_replay_memory(bytes_needed: int, saved: dict, capacity: int) -> None:
    """`check_memory` for a frame-ring replay buffer of `capacity` slots per env. `saved`: a resumed run's buffer, as
    its checkpoint holds it (`ring_state`; empty for a fresh run). A full saved ring is in memory already, and the
    new buffer takes its arrays over (`load_ring_state`): only the rest is needed. A partly filled one is copied."""
    full = bool(saved) and len(saved["frames"]) == capacity
    held = sum(value.nbytes for value in saved.values() if hasattr(value, "nbytes")) if full else 0
    check_memory(bytes_needed, "the replay buffer", "--buffer-size", held=held)


# EnvPool's task families, by the module its registry names for an id.
ENVPOOL_FAMILIES = {
    "envpool.atari": ("Atari", "Pong-v5, Breakout-v5, BeamRider-v5"),
    "envpool.mujoco.gym": ("MuJoCo", "HalfCheetah-v4, Hopper-v4, Walker2d-v4, Ant-v4"),
    "envpool.mujoco.dmc": ("DeepMind Control", "CheetahRun-v1, WalkerWalk-v1"),
    "envpool.classic_control": ("classic control", "CartPole-v1, Pendulum-v1"),
}


def hide_box_precision_warnings() -> None:
    """EnvPool's classic-control specs (Pendulum) give float32 Boxes float64 bounds, and Gymnasium warns about the cast
    each time such a space is built: nothing the user can or should act on."""
    warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32")


# Memory per EnvPool env, a floor: 769 KiB for Hopper-v4 (2,000 envs) and 1,268 KiB for Pong-v5 (64 envs), measured
# as the process's resident growth on the 2-core Xeon
ENVPOOL_ENV_BYTES = 512 * 2**10


def check_envpool_id(
    env_id: str, family: str, also: tuple[str, ...] = (), num_envs: int = 0, flag: str = "--num-envs"
) -> None:
    """`env_id` is an EnvPool id of `family` (a key of ENVPOOL_FAMILIES), or one of the ids `also`
    accepts. Close matches are suggested from those only; an id of another EnvPool family is named as such. And
    `num_envs` simulators (`flag`) fit in the memory available (trial 28: --num-envs 5000000 took 23 GB and the
    kernel killed the run, exit 137, no line, an empty run folder left)."""
    from envpool.registration import registry

    name, examples = ENVPOOL_FAMILIES[family]
    specs = registry.specs
    if env_id in specs and (specs[env_id][0] == family or env_id in also):
        hide_box_precision_warnings()
        check_memory(num_envs * ENVPOOL_ENV_BYTES, f"EnvPool's {num_envs:,} simulators (at least)", flag)
        return
    if env_id in specs:
        other = ENVPOOL_FAMILIES.get(specs[env_id][0], (specs[env_id][0],))[0]
        takes = f"{name} ones, e.g. {examples}" + (f" (or {', '.join(also)})" if also else "")
        sys.exit(f"error: --env-id {env_id!r} is an EnvPool {other} environment; this script takes {takes}")
    ids = [i for i, spec in specs.items() if spec[0] == family] + list(also)
    close = difflib.get_close_matches(env_id, ids, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; e.g. {examples}"
    sys.exit(f"error: --env-id {env_id!r} is not an EnvPool {name} environment{hint}")


def check_continuous_envpool_id(env_id: str, num_envs: int = 0) -> None:
    """The off-policy continuous-control scripts: any EnvPool MuJoCo id, and Pendulum-v1 for quick checks."""
    check_envpool_id(env_id, "envpool.mujoco.gym", also=("Pendulum-v1",), num_envs=num_envs)


def check_gymnasium_env(env_id: str, examples: str, fits: Callable | None = None):
    """`env_id` is a registered Gymnasium env that builds here (close matches suggested otherwise: only ids this install
    can build, and only those whose (observation_space, action_space) `fits` accepts, when given; a missing package or
    a failing constructor named in one line). Returns its (observation_space, action_space), from one env made and closed again."""
    import gymnasium as gym

    if env_id not in gym.registry:
        from envpool.registration import registry

        family = registry.specs[env_id][0] if env_id in registry.specs else None
        if family in ENVPOOL_FAMILIES:  # an EnvPool id (Pong-v5): say so, and not a far-fetched Gymnasium match
            sys.exit(
                f"error: --env-id {env_id!r} is an EnvPool {ENVPOOL_FAMILIES[family][0]} id, not a Gymnasium one: "
                f"this script takes Gymnasium ids, e.g. {examples}; the EnvPool scripts (cleanrl/*_envpool*.py) take it"
            )
        close = [
            candidate for candidate in difflib.get_close_matches(env_id, list(gym.registry), n=10) if _loadable(candidate)
        ]
        if fits is not None:
            close = [candidate for candidate in close if _fits_spaces(candidate, fits)][:3]
        close = close[:3]
        hint = f"; did you mean {', '.join(close)}?" if close else f"; e.g. {examples}"
        sys.exit(f"error: --env-id {env_id!r} is not a registered Gymnasium environment{hint}")
    try:
        with warnings.catch_warnings():  # "Hopper-v4 is out of date": beside the error a wrong env gets, noise
            warnings.filterwarnings("ignore", message=".*is out of date")
            env = gym.make(env_id)
    except gym.error.DependencyNotInstalled as error:
        sys.exit(f"error: --env-id {env_id!r} needs a package that is not installed: {str(error).splitlines()[0]}")
    except Exception as error:  # an env that cannot be built here: say so in one line
        sys.exit(f"error: --env-id {env_id!r} could not be created ({type(error).__name__}: {str(error).splitlines()[0]})")
    spaces = env.observation_space, env.action_space
    env.close()
    return spaces


@functools.cache
def _loadable(env_id: str) -> bool:
    """Whether this install can build `env_id`, checked cheaply (once per process): a module entry point must import
    (a missing mujoco or Box2D raises there); a function entry point, Gymnasium's stub for the removed mujoco-py ids
    (Hopper-v3) among them, is tried by making the env. A suggestion the user would then see refused is no help."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            entry_point = gym.spec(env_id).entry_point
            if isinstance(entry_point, str):
                load_env_creator(entry_point)
            else:
                gym.make(env_id).close()
    except Exception:
        return False
    return True


def _fits_spaces(env_id: str, fits: Callable) -> bool:
    """Whether a suggested Gymnasium env builds here and its spaces are of the kind the script takes."""
    import gymnasium as gym

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = gym.make(env_id)
            spaces = env.observation_space, env.action_space
            env.close()
    except Exception:
        return False
    return bool(fits(*spaces))
