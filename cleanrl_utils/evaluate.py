"""Play a saved model and report per-episode returns, optionally filming the episodes.

    python -m cleanrl_utils.evaluate --model-path runs/<run>/<exp_name>.cleanrl_model --episodes 10
    python -m cleanrl_utils.evaluate --model-path ... --episodes 2 --capture-video   # MP4s beside the model
    python -m cleanrl_utils.evaluate --model-path runs/<run> --greedy   # every kept checkpoint, and the best

A folder evaluates each `checkpoint-<step>.pt` (JAX: `.msgpack`) a run kept with `--keep-checkpoints`, in
training order, on the same evaluation seed, and names the best: the "best mean test return during training" that
Tianshou's tables report, next to which a run's final training return is the stricter figure.

A `.cleanrl_model` file (and every checkpoint) holds the script's name and path, its args and the weights (plus,
for scripts that normalise observations, the normaliser state), so nothing else needs to be passed. The script
is imported from that path and its own `evaluation_player` makes the envs and the policy: evaluation plays exactly
what training played, for a copied and changed script too. `--script` names another path (a moved script, or a
file from before paths were recorded whose script is not in this clone's `cleanrl/`).
"""

from cleanrl_utils.stop import LEFT_BEHIND, exit_tool_on_signals, make_output_dir, refused_memory

if __name__ == "__main__":
    # Ctrl-C or SIGTERM, also while the libraries below load: one line, no traceback
    exit_tool_on_signals("cleanrl_utils.evaluate")

import importlib.util
import os
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Annotated, Callable

import numpy as np
import tyro

from cleanrl_utils.checkpoint import kept_checkpoint_step, upgrade_saved_args
from cleanrl_utils.checks import MAX_SEED, check_torch_threads, hide_box_precision_warnings
from cleanrl_utils.hardware import native_bf16, this_machine
from cleanrl_utils.run import check_not_empty, check_writable_dir, torch_threads
from cleanrl_utils.video import record_gymnasium_episodes


@dataclass
class EvalArgs:
    model_path: str
    """path of a `.cleanrl_model` file written by a script's `--save-model` (or a checkpoint), or a run folder whose
    kept checkpoints (`--keep-checkpoints`) are evaluated one by one"""
    episodes: int = 10
    """number of episodes (Atari: whole games) to play"""
    seed: int = 10_000
    """seed of the evaluation envs (differs from training seeds by default)"""
    greedy: bool = False
    """take the most likely action instead of sampling from the policy"""
    cuda: bool = True
    """use cuda when available"""
    capture_video: bool = False
    """write one MP4 per episode (Atari: the EnvPool games themselves; other envs: extra episodes played
    in the same Gymnasium env id, MuJoCo rendered headless through EGL)"""
    video_dir: Annotated[
        str | None, tyro.conf.arg(metavar="DIR", help_behavior_hint="(default: videos/ beside the model file)")
    ] = None
    """where the videos go"""
    torch_threads: int = 0
    """torch intra-op threads on CPU (0: auto, OMP_NUM_THREADS if set, else one per core)"""
    epsilon: Annotated[
        float | None, tyro.conf.arg(metavar="FLOAT", help_behavior_hint="(default: 0.05, as CleanRL evaluates DQN)")
    ] = None
    """DQN models: the probability of a random action (--greedy plays with 0 and cannot be combined with it); the
    policy scripts sample from their policy and ignore it"""
    script: Annotated[
        str | None, tyro.conf.arg(metavar="SCRIPT", help_behavior_hint="(default: the one the file records)")
    ] = None
    """the script whose `evaluation_player` plays the model"""


def load_flax_checkpoint(model_path: str) -> dict | None:
    """The JAX scripts save flax msgpack (same keys, flax params as "model_state_dict"); None if not one.
    A JAX *training* checkpoint (`checkpoint.msgpack`) holds the params inside its "train_state" and
    the observation statistics inside its "normalizers": they are read from there."""
    from flax.serialization import msgpack_restore

    try:
        with open(model_path, "rb") as f:
            checkpoint = msgpack_restore(f.read())
    except Exception:
        return None
    if not isinstance(checkpoint, dict) or "script" not in checkpoint:
        return None
    train_state, normalizers = checkpoint.get("train_state"), checkpoint.get("normalizers")
    if "model_state_dict" not in checkpoint and isinstance(train_state, dict) and "params" in train_state:
        checkpoint["model_state_dict"] = train_state["params"]
    if "obs_rms" not in checkpoint and isinstance(normalizers, dict) and "obs_rms" in normalizers:
        checkpoint["obs_rms"] = normalizers["obs_rms"]  # the continuous-action script's observation statistics
    if not isinstance(checkpoint.get("model_state_dict"), dict) or not isinstance(checkpoint.get("args"), dict):
        sys.exit(f"error: --model-path {model_path!r} is not a .cleanrl_model file or checkpoint (no weights or args)")
    return checkpoint


# The smallest address-space limit (`ulimit -v`) under which a JAX model played here (2.5 GB, AMD EPYC, JAX on CPU).
# Below about 2 GB XLA aborts or segfaults in C++ (trial 14: exit 134, 139), which no Python handler can turn into a line.
JAX_ADDRESS_SPACE = 2_500_000 * 1024


def check_address_space_for_jax(model_path: str) -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft < JAX_ADDRESS_SPACE:
        sys.exit(
            f"error: this process may map {soft // 2**20:,} MiB (ulimit -v), less than the {JAX_ADDRESS_SPACE // 2**20:,} "
            f"MiB JAX needs to play {model_path!r} (below it XLA aborts with no error line): raise the limit"
        )


def load_checkpoint(model_path: str) -> dict:
    if not os.path.isfile(model_path):
        sys.exit(f"error: --model-path {model_path!r} does not exist")
    flax_checkpoint = load_flax_checkpoint(model_path)
    if flax_checkpoint is not None:
        check_address_space_for_jax(model_path)
        upgrade_saved_args(flax_checkpoint["args"])
        return checkpoint_with_finite_weights(flax_checkpoint, model_path)
    import torch

    try:
        checkpoint = torch.load(model_path, map_location="cpu", weights_only=True)
    except FileNotFoundError:  # there when checked, gone when read (trial 22: a run folder moved while filming)
        sys.exit(f"error: --model-path {model_path!r} no longer exists: it was moved or deleted while evaluate read it")
    except Exception as error:  # a truncated or foreign file: say so in one line, naming what evaluate reads
        sys.exit(
            f"error: --model-path {model_path!r} is not readable as a model file or checkpoint (.cleanrl_model, "
            f"checkpoint.pt or checkpoint.msgpack; {type(error).__name__}): truncated, or another program's file?"
        )
    if not isinstance(checkpoint, dict) or "script" not in checkpoint or "model_state_dict" not in checkpoint:
        sys.exit(f"error: --model-path {model_path!r} is not a .cleanrl_model file (no script name or weights)")
    if not isinstance(checkpoint.get("args"), dict):
        sys.exit(f"error: --model-path {model_path!r} is not a .cleanrl_model file (no training args)")
    upgrade_saved_args(checkpoint["args"])
    return checkpoint_with_finite_weights(checkpoint, model_path)


def checkpoint_with_finite_weights(checkpoint: dict, model_path: str) -> dict:
    """NaN or inf in the weights or statistics played as a traceback or a "mean return nan" with exit 0 (trial 24,
    B1); a run never saves them, so the file is damaged or edited: one line."""
    from cleanrl_utils.checkpoint import first_non_finite

    bad = first_non_finite(checkpoint)
    if bad is not None:
        sys.exit(
            f"error: --model-path {model_path!r} holds NaN or inf in {bad!r}: damaged or edited (a run never saves those)"
        )
    return checkpoint


def play_in_bf16(train_args: dict, device) -> bool:
    """For a torch script's `evaluation_player`: play at the trained precision where this machine computes bf16
    natively, else in fp32. The weights are fp32 either way, and bf16 without native support runs several times
    slower."""
    return train_args.get("precision") == "bf16" and native_bf16(this_machine(device))[0]


@dataclass
class Player:
    """What a script's `evaluation_player(saved, *, num_envs, seed, device, greedy, epsilon, render)` returns: the
    evaluation envs, made and seeded by the script, and the policy that plays them. Every script defines that
    function next to its network, so a copied and changed script evaluates and films its own models."""

    envs: object
    """a vector env of `num_envs` envs, seeded (EnvPool: at construction; Gymnasium: see `reset_seed`)"""
    act: Callable[[np.ndarray], np.ndarray]
    """a batch of observations -> a batch of actions (a batch of one when filming in Gymnasium)"""
    whole_games: bool = False
    """Atari: a game is every life, its return the unclipped `info["reward"]`, over at `info["terminated"]` or
    truncation; with `render` the envs were made to film themselves (EnvPool's RGB renderer)"""
    film_env_id: str | None = None
    """the envs cannot render (EnvPool's MuJoCo has no headless OpenGL): videos are extra episodes played in the
    Gymnasium env of this id, same model"""
    reset_seed: int | None = None
    """Gymnasium vector envs take their seed at the first reset"""


def written_by(file: str) -> dict[str, str]:
    """What every saved model and checkpoint of the script `file` (its `__file__`) records about it: its name (a copy
    under a new name is a new script) and its path, from which `evaluate` imports its `evaluation_player`. The path
    is relative to the repository root for a script inside this clone (another clone, or a run folder copied to
    another machine, finds it there), absolute otherwise."""
    path = os.path.realpath(file)
    relative = os.path.relpath(path, REPO_ROOT)
    return {
        "script": os.path.splitext(os.path.basename(path))[0],
        "script_path": path if relative.startswith(os.pardir) else relative,
    }


# Envs played at once. One env per episode keeps short episodes from being over-represented, but 100,000 of them
# exhaust memory: past this many, episodes are played in rounds of one episode per env, on the same envs.
MAX_EVAL_ENVS = 32


# Seconds between the lines that say how far an evaluation of several rounds has got
PROGRESS_SECONDS = 10.0


def eval_env_count(episodes: int) -> int:
    """How many envs a player is asked to make for `episodes` episodes."""
    return min(episodes, MAX_EVAL_ENVS)


def play(player: Player, episodes: int, video_dir: str | None = None) -> list[float]:
    """`episodes` episodes on the player's envs, in rounds of one episode per env (the last round uses as many envs
    as it needs); returns in raw units, in episode order. With `video_dir` and envs that render, each episode is
    filmed from the envs themselves."""
    envs = player.envs
    obs, _ = envs.reset() if player.reset_seed is None else envs.reset(seed=player.reset_seed)
    film_dir = None if player.film_env_id else video_dir
    returns: list[float] = []
    # Over several rounds, what was played so far: a line after the first round and every 10 s, and a stop's line says
    # it (trial 28: 10^20 episodes printed nothing, and a SIGTERM's line dropped every finished episode)
    said, last_line = [], -float("inf")
    if episodes > len(obs):  # trial 29: a first round of long games (Pong) printed nothing for minutes
        said[:] = [f"0 of {episodes:,} episodes played"]  # before the line: a stop right after it must say this
        LEFT_BEHIND.append(said[0])
        print(f"playing {episodes:,} episodes, {len(obs)} at a time", flush=True)
    try:
        while len(returns) < episodes:
            if returns:  # a new round: every env starts a fresh episode (the seeded RNGs go on, so new ones)
                obs, _ = envs.reset()
            playing = min(len(obs), episodes - len(returns))
            returns += play_round(envs, player.act, obs, playing, len(returns), player.whole_games, film_dir)
            if len(returns) < episodes:
                so_far = f"{len(returns):,} of {episodes:,} episodes played: mean return {np.mean(returns):.2f} +- {np.std(returns):.2f}"
                LEFT_BEHIND[:] = [entry for entry in LEFT_BEHIND if entry not in said] + [so_far]
                said[:] = [so_far]
                if time.monotonic() - last_line >= PROGRESS_SECONDS:
                    print(so_far, flush=True)
                    last_line = time.monotonic()
    finally:
        LEFT_BEHIND[:] = [entry for entry in LEFT_BEHIND if entry not in said]
    envs.close()
    return returns


def play_round(envs, act, obs, playing: int, first_episode: int, whole_games: bool, video_dir: str | None) -> list[float]:
    """One episode in each of the first `playing` envs, from observations `obs` (the others run on, ignored)."""
    returns = np.zeros(playing)
    finished = np.zeros(playing, dtype=bool)
    writers = None
    if video_dir is not None:
        from cleanrl_utils.video import VideoWriter

        writers = [
            VideoWriter(os.path.join(video_dir, f"eval-episode-{first_episode + i}.mp4"), fps=15) for i in range(playing)
        ]
        for i, frame in enumerate(envs.render(env_ids=np.arange(playing))):
            writers[i].append(frame)
    while not finished.all():
        obs, reward, terminated, truncated, info = envs.step(act(obs))
        if whole_games:
            reward, ended = info["reward"], info["terminated"].astype(bool) | truncated
        else:
            ended = terminated | truncated
        returns += reward[:playing] * ~finished
        if writers is not None:
            filming = np.flatnonzero(~finished)
            for i, frame in zip(filming, envs.render(env_ids=filming)):
                writers[i].append(frame)
            for i in np.flatnonzero(ended[:playing] & ~finished):
                writers[i].close()  # whole: it takes its own name now, whatever happens to the rest of the round
        finished |= ended[:playing]
    return returns.tolist()


# The repository this cleanrl_utils belongs to: a script recorded relative to it is found in whichever clone evaluates.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def find_script(saved: dict, model_path: str, script: str | None) -> str:
    """The script that plays `saved`: `script` if given (--script), else the path the file records (relative to the
    repository root for a script inside it), else, for files written before paths were recorded, the script of the
    recorded name in this clone's `cleanrl/`."""
    if script is not None:
        if os.path.isdir(script):
            sys.exit(f"error: --script {script!r} is a folder; give the .py file of the script that wrote the model")
        if not os.path.isfile(script):
            sys.exit(f"error: --script {script!r} does not exist (give the path of the script that wrote the model)")
        return script
    recorded = saved.get("script_path")
    if isinstance(recorded, str) and recorded:
        path = recorded if os.path.isabs(recorded) else os.path.join(REPO_ROOT, recorded)
    else:
        path = os.path.join(REPO_ROOT, "cleanrl", f"{saved['script']}.py")
    if not os.path.isfile(path):
        if recorded:
            writer = f"the script at {path!r}, which no longer exists"
        else:
            writer = f"{saved['script']!r} (a file from before script paths were recorded), and there is no {path!r}"
        sys.exit(
            f"error: --model-path {model_path!r} was written by {writer}; pass --script with the path of that script "
            "(or of a copy that builds the same network)"
        )
    return path


def import_script(path: str):
    """The script at `path` as a module, its `__main__` block not run (scripts import without side effects). A
    script already imported (as a module of the `cleanrl` package, or as the running `__main__`) is that module, not a second copy."""
    real = os.path.realpath(path)
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and os.path.realpath(file) == real:
            return module
    name = "evaluated_" + os.path.splitext(os.path.basename(real))[0]
    spec = importlib.util.spec_from_file_location(name, real)
    if spec is None or not real.endswith(".py"):
        sys.exit(f"error: --script {path!r} is not a Python script (a .py file)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the user's script does not import: one line with where, not evaluate's own frames
        del sys.modules[name]
        if isinstance(error, (ImportError, MemoryError, RuntimeError)) and machine_refused(error):
            raise  # its libraries under a memory limit: main() names the machine (trial 14: this blamed a good script)
        message = " ".join(str(error).split())[:300]  # SyntaxError's names the file and line
        sys.exit(f"error: the script {path!r} does not import: {type(error).__name__}: {message}")
    return module


def evaluate(
    model_path: str,
    episodes: int = 10,
    seed: int = 10_000,
    greedy: bool = False,
    cuda: bool = True,
    video_dir: str | None = None,
    epsilon: float | None = 0.05,
    script: str | None = None,
) -> list[float]:
    epsilon = 0.05 if epsilon is None else epsilon  # EvalArgs' default: CleanRL's DQN evaluation setting
    if episodes <= 0:
        sys.exit(f"error: --episodes must be a positive integer, got {episodes}")
    if not 0 <= epsilon <= 1:
        sys.exit(f"error: --epsilon must be in [0, 1] (a probability), got {epsilon}")
    if not 0 <= seed <= MAX_SEED - MAX_EVAL_ENVS:  # env i of the evaluation gets seed + i, a 32-bit signed integer
        sys.exit(
            f"error: --seed must be in 0..{MAX_SEED - MAX_EVAL_ENVS} (seeds are 32-bit signed integers in every script here), got {seed}"
        )
    saved = load_checkpoint(model_path)
    script_path = find_script(saved, model_path, script)
    module = import_script(script_path)
    name = os.path.splitext(os.path.basename(script_path))[0]
    if not callable(getattr(module, "evaluation_player", None)):
        sys.exit(
            f"error: {script_path!r} defines no evaluation_player(saved, *, num_envs, seed, device, greedy, epsilon, "
            "render): copy it from the script this one started from"
        )
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() and cuda else "cpu")
    try:
        player = module.evaluation_player(
            saved,
            num_envs=eval_env_count(episodes),
            seed=seed,
            device=device,
            greedy=greedy,
            epsilon=epsilon,
            render=video_dir is not None,
        )
    except Exception as error:
        # A file whose weights, normaliser or args do not fit the network and env its script builds (written by
        # another script, or edited): load_state_dict's size mismatches, flax's parameter shape errors, a missing
        # key, an Atari id given to a MuJoCo factory. One line, with the start of what failed (load_state_dict's details are on later lines);
        # an error once episodes play is not the file's, and is raised as is (play is outside this try).
        first_line = " ".join(str(error).split())[:300]
        env_id = saved["args"].get("env_id")
        if machine_refused(error):  # not the file's fault: a campaign's test once blamed a good checkpoint for this
            sys.exit(
                f"error: the machine refused a resource while {name} built the player for {env_id!r} "
                f"({type(error).__name__}: {first_line}): too many threads or processes, or too little memory, at "
                "this moment; the model file was not read wrong: retry when the machine is less busy"
            )
        sys.exit(
            f"error: --model-path {model_path!r} does not fit the network and env that {name} builds for "
            f"{env_id!r} ({type(error).__name__}: {first_line}); was it written by another script, or edited?"
        )
    if video_dir and player.film_env_id:  # filmed in Gymnasium: an id it cannot make is one line before playing
        from cleanrl_utils.video import check_gymnasium_films

        check_gymnasium_films(player.film_env_id)
    if video_dir:  # a stop before the first video removes it again, with the folders above it made for it
        make_output_dir(
            video_dir,
            holds="the videos: each eval-episode-<n>.mp4 a whole episode, and an episode a Ctrl-C or "
            "SIGTERM cut short, if any, as eval-episode-<n>.partial.mp4",
        )
    returns = play(player, episodes, video_dir)
    if video_dir and player.film_env_id:
        limit = saved["args"].get("max_episode_steps")  # the run's time limit, as its evaluation envs have it
        record_gymnasium_episodes(player.film_env_id, player.act, video_dir, episodes, seed, max_episode_steps=limit)
    return returns


def machine_refused(error: Exception) -> bool:
    """An error from the machine, not from the file: memory, or a thread or process the OS would not start (EnvPool's
    and OpenMP's thread pools raise RuntimeError "Resource temporarily unavailable", EAGAIN, when the machine's
    threads run out; a library loaded under a memory limit raises ImportError "failed to map segment")."""
    return isinstance(error, OSError) or refused_memory(error)


def kept_checkpoints(run_dir: str) -> list[tuple[int, str]]:
    """(global step, path) of every checkpoint a run kept with --keep-checkpoints, in training order."""
    kept = []
    for name in os.listdir(run_dir):
        step_ext = kept_checkpoint_step(name)
        if step_ext and step_ext[1] in (".pt", ".msgpack"):
            kept.append((step_ext[0], os.path.join(run_dir, name)))
    return sorted(kept)


def evaluate_kept_checkpoints(run_dir: str, args: EvalArgs) -> tuple[int, float]:
    """Each kept checkpoint of `run_dir` played for `args.episodes` episodes, one line each; returns the step
    and mean return of the best."""
    kept = kept_checkpoints(run_dir)
    if not kept:
        # trial 16: the line did not point at what the folder does hold
        held = sorted(n for n in os.listdir(run_dir) if n.endswith(".cleanrl_model") or n.startswith("checkpoint."))
        instead = f"; give one of its files instead: {', '.join(os.path.join(run_dir, n) for n in held)}" if held else ""
        sys.exit(
            f"error: --model-path {run_dir!r} is a folder without kept checkpoints (checkpoint-<step>.pt or .msgpack, "
            f"written by a run with --keep-checkpoints){instead}"
        )
    best_step, best_mean = 0, -np.inf
    for step, path in kept:
        returns = evaluate(path, args.episodes, args.seed, args.greedy, args.cuda, epsilon=args.epsilon, script=args.script)
        print(
            f"step {step:>11,}: mean return over {len(returns)} episode{'s' * (len(returns) != 1)} {np.mean(returns):10.2f} +- {np.std(returns):.2f}",
            flush=True,
        )
        if np.mean(returns) > best_mean:
            best_step, best_mean = step, float(np.mean(returns))
    print(f"best: step {best_step:,}, mean return {best_mean:.2f} (of {len(kept)} kept checkpoints)")
    return best_step, best_mean


def main() -> None:
    args = tyro.cli(EvalArgs, prog="python -m cleanrl_utils.evaluate")
    try:
        evaluate_as_asked(args)
    except (ImportError, MemoryError, RuntimeError) as error:
        if not machine_refused(error):
            raise
        # trial 13: under a memory limit, the import of flax (a JAX model) or torch failed as a traceback
        first_line = " ".join(str(error).split())[:300]
        sys.exit(
            f"error: the machine refused memory or threads while evaluating {args.model_path!r} "
            f"({type(error).__name__}: {first_line}); the model file was not read wrong: retry with more memory "
            "(ulimit -v, a container's limit) or when the machine is less busy"
        )


def evaluate_as_asked(args: EvalArgs) -> None:
    hide_box_precision_warnings()  # as the training scripts do
    # Filming a JAX model starts ffmpeg (imageio) in a child process that execs at once; JAX's warning concerns a
    # forked child that goes on running Python beside JAX's threads, which none here does.
    warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
    # The v4 MuJoCo ids are the ones trained (EnvPool's): Gymnasium's advice to move to v5 is noise here.
    warnings.filterwarnings("ignore", message=".*is out of date")
    check_torch_threads(args.torch_threads)
    if args.greedy and args.epsilon is not None:
        sys.exit(f"error: --greedy plays with epsilon 0, --epsilon {args.epsilon} asks for another: give one of the two")
    if args.video_dir is not None and not args.capture_video:
        sys.exit(f"error: --video-dir {args.video_dir!r} needs --capture-video (no video is written without it)")
    if args.video_dir is not None:  # trial 17: '' was taken as "the default folder", silently
        check_not_empty(args.video_dir, "--video-dir")
    import torch

    torch.set_num_threads(torch_threads(args.torch_threads))
    if os.path.isdir(args.model_path):
        if args.capture_video:
            sys.exit(f"error: --capture-video films one model: give a file, not the folder {args.model_path!r}")
        evaluate_kept_checkpoints(args.model_path, args)
        return
    video_dir = None
    if args.capture_video:
        video_dir = args.video_dir or os.path.join(os.path.dirname(os.path.abspath(args.model_path)), "videos")
        # made by evaluate(), after its own checks; the line names the folder the user did not name (trial 17)
        check_writable_dir(video_dir, "--video-dir" if args.video_dir else "videos/ beside --model-path", keep=False)
    returns = evaluate(
        args.model_path, args.episodes, args.seed, args.greedy, args.cuda, video_dir, epsilon=args.epsilon, script=args.script
    )
    for i, episodic_return in enumerate(returns):
        print(f"episode {i}: return {episodic_return:.2f}")
    if video_dir:
        print(f"videos: {os.path.abspath(video_dir)}")  # a training run's evaluator films into ".": named in full
    print(
        f"mean return over {len(returns)} episode{'s' * (len(returns) != 1)}: {np.mean(returns):.2f} +- {np.std(returns):.2f}"
    )


if __name__ == "__main__":
    main()
