"""cleanrl_utils.video.VideoJobs: at most one evaluator at a time, skips said out loud, the last video
waited for, evaluators out of reach of a terminal's Ctrl-C.

The scheduling tests run a stub `cleanrl_utils.evaluate` (found first: the test runs from a folder
holding a stub package) that waits for a release file, so the test decides when each "video" ends.
One test films a real (untrained) Atari policy with the real evaluator."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from helpers import decoded_video

from cleanrl_utils.stop import STILL_FILMING
from cleanrl_utils.video import VideoJobs

STUB_EVALUATOR = """
import json, os, sys, time

argv = sys.argv[1:]
video_dir = argv[argv.index("--video-dir") + 1]
model_path = argv[argv.index("--model-path") + 1]
record = {"argv": argv, "cwd": os.getcwd(), "pid": os.getpid(), "sid": os.getsid(0), "env": os.environ.get("STUB_ENV"), "start": time.time()}
record["render_threads"] = os.environ.get("LP_NUM_THREADS")
with open(os.path.join(video_dir, "started.json"), "w") as f:
    json.dump(record, f)
print("stub evaluator filming", flush=True)
deadline = time.time() + 60
while not os.path.exists(os.path.join(video_dir, "release")) and time.time() < deadline:
    time.sleep(0.01)
with open(os.path.join(video_dir, "eval-episode-0.mp4"), "w") as f:
    f.write(str(time.time()))
sys.exit(3 if open(model_path).read() == "fail" else 0)
"""


@pytest.fixture
def stub(tmp_path, monkeypatch):
    """The evaluators find the stub `cleanrl_utils.evaluate` first (PYTHONPATH: they run in their video folder);
    returns the run folder."""
    package = tmp_path / "stub" / "cleanrl_utils"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "evaluate.py").write_text(STUB_EVALUATOR)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "stub"))  # before the installed package on `python -m`'s path
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return run_dir


def write_model(content: str = "weights"):
    def write(path: str) -> str:
        with open(path, "w") as f:
            f.write(content)
        return path

    return write


def video_dir(run_dir, iteration: int) -> str:
    return os.path.join(str(run_dir), "videos", f"iteration-{iteration}")


def wait_started(run_dir, iteration: int) -> dict:
    path = os.path.join(video_dir(run_dir, iteration), "started.json")
    deadline = time.time() + 30
    while not os.path.exists(path):
        assert time.time() < deadline, f"the evaluator of iteration {iteration} did not start"
        time.sleep(0.01)
    time.sleep(0.05)  # the stub writes the file in one go; let it close
    with open(path) as f:
        return json.load(f)


def release(run_dir, iteration: int, after: float = 0.0) -> None:
    def touch():
        open(os.path.join(video_dir(run_dir, iteration), "release"), "w").close()

    threading.Timer(after, touch).start() if after else touch()


def test_one_evaluator_at_a_time_skips_said_and_the_last_one_waited_for(stub, capsys):
    run_dir = stub
    jobs = VideoJobs(str(run_dir), write_model(), env={**os.environ, "STUB_ENV": "passed"})
    jobs.film(2)
    started = wait_started(run_dir, 2)
    # in its video folder, with paths inside it: a run folder moved meanwhile still gets its video (trial 22, Z1)
    assert started["cwd"] == video_dir(run_dir, 2)
    assert " ".join(started["argv"]).endswith(
        "--model-path model.cleanrl_model --episodes 1 --capture-video --video-dir . --no-cuda --torch-threads 1"
    )
    assert started["env"] == "passed"
    assert started["render_threads"] == "1"  # one core for Mesa's software renderer too: training shares the cores

    assert STILL_FILMING == [video_dir(run_dir, 2)]  # named by a second Ctrl-C's line: it finishes on its own
    jobs.film(4)  # due while 2 is still filming: skipped, and said
    out = capsys.readouterr().out
    assert out == "evaluation video of iteration 4 skipped: the previous one is still being filmed\n"
    jobs.film(5)  # the next skips are counted, not printed one line each (trial 17: 498 lines at --video-every 2)
    jobs.film(7)
    assert capsys.readouterr().out == ""
    assert not any(os.path.exists(video_dir(run_dir, i)) for i in (4, 5, 7))

    release(run_dir, 2)
    deadline = time.time() + 30
    while jobs.running[0].poll() is None:
        assert time.time() < deadline
        time.sleep(0.01)
    jobs.film(6)  # 2 has ended: its result is reported with the count of the skips, 6 starts
    assert capsys.readouterr().out == (
        f"evaluation video written: {video_dir(run_dir, 2)}\n"
        "3 evaluation videos skipped while it was filmed (iterations 4 to 7)\n"
    )
    wait_started(run_dir, 6)

    release(run_dir, 6, after=0.5)
    jobs.film(8, final=True)  # the last video waits for 6 instead of being skipped, and says so (trial 10, D4)
    wait_started(run_dir, 8)
    waiting = "waiting for the evaluation video still being filmed in {} ...\n"
    assert capsys.readouterr().out == waiting.format(video_dir(run_dir, 6)) + (
        f"evaluation video written: {video_dir(run_dir, 6)}\n"
    )

    release(run_dir, 8, after=0.3)
    jobs.finish()  # waits for 8
    assert capsys.readouterr().out == waiting.format(video_dir(run_dir, 8)) + (
        f"evaluation video written: {video_dir(run_dir, 8)}\n"
    )
    jobs.finish()  # nothing left: nothing printed
    assert capsys.readouterr().out == ""
    assert STILL_FILMING == []
    assert jobs.results == [f"evaluation video written: {video_dir(run_dir, i)}" for i in (2, 6, 8)]

    # never two at once: each evaluator started after the previous one had written its video
    for earlier, later in ((2, 6), (6, 8)):
        ended = float(open(os.path.join(video_dir(run_dir, earlier), "eval-episode-0.mp4")).read())
        assert wait_started(run_dir, later)["start"] >= ended
    assert "stub evaluator filming" in open(os.path.join(video_dir(run_dir, 8), "evaluate.log")).read()


def test_a_failed_evaluator_is_reported_with_its_log(stub, capsys, monkeypatch):
    monkeypatch.setenv("LP_NUM_THREADS", "3")
    jobs = VideoJobs(str(stub), write_model("fail"))
    jobs.film(1, final=True)
    assert wait_started(stub, 1)["render_threads"] == "3"  # the user's own setting wins
    release(stub, 1)
    jobs.finish()
    log = os.path.join(video_dir(stub, 1), "evaluate.log")
    out = capsys.readouterr().out  # released just before: finish() may find it still running and say it waits
    out = out.removeprefix(f"waiting for the evaluation video still being filmed in {video_dir(stub, 1)} ...\n")
    assert out == f"evaluation video FAILED (exit 3, see {video_dir(stub, 1)}/evaluate.log): {video_dir(stub, 1)}\n"
    assert os.path.isfile(log)


TRAINING = """
import sys, time
from cleanrl_utils.stop import StopAfterIteration
from cleanrl_utils.stop import STILL_FILMING
from cleanrl_utils.video import VideoJobs

def write_model(path):
    open(path, "w").write("weights")
    return path

videos = VideoJobs(sys.argv[1], write_model)
stop = StopAfterIteration() if sys.argv[2] == "stop-after-iteration" else None
if stop is None:  # Python's own Ctrl-C, even if this test runs under a shell that started it with SIGINT ignored
    import signal
    signal.signal(signal.SIGINT, signal.default_int_handler)
videos.film(1)
print("filming", flush=True)
while stop is None or not stop.requested:  # training
    time.sleep(0.01)
videos.finish()
print("training process done", flush=True)
"""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("handling", ["stop-after-iteration", "python-default"])
def test_a_terminal_ctrl_c_does_not_kill_the_evaluator(stub, handling):
    # Ctrl-C in a terminal reaches the whole foreground process group: the signal goes to the group
    training = subprocess.Popen(
        [sys.executable, "-c", TRAINING, str(stub), handling],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, so that the test can signal all of it
    )
    assert training.stdout.readline() == "filming\n"
    evaluator = wait_started(stub, 1)
    assert evaluator["sid"] != os.getsid(training.pid)  # a session (and process group) of its own
    os.killpg(training.pid, signal.SIGINT)
    if handling == "python-default":  # the training process dies of it; the evaluator goes on
        training.communicate(timeout=30)
        assert training.returncode != 0 and pid_alive(evaluator["pid"])
    else:  # the training process stops and waits for the video
        time.sleep(0.3)
        assert training.poll() is None and pid_alive(evaluator["pid"])
    release(stub, 1)
    video = os.path.join(video_dir(stub, 1), "eval-episode-0.mp4")
    deadline = time.time() + 30
    while not os.path.exists(video) or pid_alive(evaluator["pid"]):
        assert time.time() < deadline, "the evaluator did not finish its video"
        time.sleep(0.02)
    if handling == "stop-after-iteration":
        stdout, _ = training.communicate(timeout=30)
        assert training.returncode == 0
        waiting = f"waiting for the evaluation video still being filmed in {video_dir(stub, 1)} ...\n"
        assert stdout == f"{waiting}evaluation video written: {video_dir(stub, 1)}\ntraining process done\n"


def test_a_real_policy_is_filmed_by_the_real_evaluator(tmp_path):
    import torch

    from cleanrl.ppo_atari_envpool import Agent, Args

    args = Args(env_id="Breakout-v5", max_episode_steps=60, precision="fp32", channels_last="off")
    agent = Agent(4, bf16=False, channels_last=False)

    def write_model(path: str) -> str:
        torch.save({"script": "ppo_atari_envpool", "model_state_dict": agent.state_dict(), "args": vars(args)}, path)
        return path

    jobs = VideoJobs(str(tmp_path), write_model)
    jobs.film(5, final=True)
    jobs.finish()
    folder = video_dir(tmp_path, 5)
    assert jobs.results == [f"evaluation video written: {folder}"], open(os.path.join(folder, "evaluate.log")).read()
    frames = decoded_video(os.path.join(folder, "eval-episode-0.mp4"))
    assert frames.shape[1:] == (210, 160, 3) and len(frames) <= 1 + 60 + 5


def test_a_video_due_after_the_run_folder_moved_ends_the_run_and_makes_no_folder(tmp_path):
    """Trial 22, Z3: the run folder moved between its checkpoint and a video due in the same iteration: the video's
    folder was made again under the old path, and the run went on unaware, split over the two folders."""
    from cleanrl_utils.run import lock_run_folder
    from cleanrl_utils.stop import RUN_FOLDER_LOCKS

    run_dir = tmp_path / "runs" / "CartPole-v1__ppo__1__1"
    run_dir.mkdir(parents=True)
    lock_run_folder(str(run_dir))
    try:
        run_dir.rename(tmp_path / "kept")
        with pytest.raises(SystemExit) as stopped:
            VideoJobs(str(run_dir), write_model()).film(2)
        assert str(stopped.value.code).startswith(f"error: the run folder {run_dir} was moved to {tmp_path / 'kept'}")
        assert not run_dir.exists() and os.listdir(tmp_path / "kept") == []
    finally:
        os.close(RUN_FOLDER_LOCKS.pop(str(run_dir)))


def test_a_run_folder_moved_while_the_last_video_is_awaited_names_the_new_place_and_offers_no_resume(stub, capsys):
    """Trial 23, A2: the run folder moved while the run, past its last iteration, waited for a video: the run said
    "evaluation video written: <the old path>", then "moved ... while the run trained ... (continue with --resume
    ...)", a resume that only says the run already ran its iterations."""
    from cleanrl_utils.run import checkpoint_due, lock_run_folder
    from cleanrl_utils.stop import LOOP_PROGRESS, RUN_FOLDER_LOCKS

    run_dir = stub / "runs" / "CartPole-v1__ppo__1__1"
    run_dir.mkdir(parents=True)
    (run_dir / "checkpoint.pt").write_bytes(b"saved")
    lock_run_folder(str(run_dir))
    kept = stub / "kept"
    try:
        jobs = VideoJobs(str(run_dir), write_model())
        assert not checkpoint_due(2, 4, 0, stopping=False)
        jobs.film(2)
        wait_started(run_dir, 2)
        run_dir.rename(kept)
        assert checkpoint_due(4, 4, 0, stopping=False)  # the last iteration: its checkpoint, then its video
        release(kept, 2, after=0.3)
        with pytest.raises(SystemExit) as stopped:
            jobs.film(4, final=True)
        assert capsys.readouterr().out.splitlines()[-1] == f"evaluation video written: {kept / 'videos' / 'iteration-2'}"
        assert stopped.value.code == (
            f"error: the run folder {run_dir} was moved to {kept} after the run trained all its iterations, so this run "
            f"cannot write on; its final checkpoint is {kept / 'checkpoint.pt'} (--resume {kept / 'checkpoint.pt'} "
            "--save-model writes its model)"
        )
        assert not run_dir.exists() and os.path.exists(kept / "videos" / "iteration-2" / "eval-episode-0.mp4")
    finally:
        LOOP_PROGRESS.clear()
        STILL_FILMING.clear()
        os.close(RUN_FOLDER_LOCKS.pop(str(run_dir)))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a file every write to fails with ENOSPC")
def test_a_full_disk_under_a_snapshot_model_says_what_the_run_keeps_and_leaves_no_empty_folder(stub):
    """Trial 24, K7: a full disk while a video's snapshot model was written mid-training said only "Free space there
    and run again", though the run folder kept 25 iterations of curves, and left an empty videos/iteration-26/
    behind. The snapshot is written as a script writes it (save_torch), its `.tmp` linked to /dev/full."""
    import torch

    from cleanrl_utils.checkpoint import save_torch
    from cleanrl_utils.stop import COMPLETED_SAVES, FRESH_RUN_FOLDER, LOOP_PROGRESS

    def snapshot_on_a_full_disk(path: str) -> str:
        os.symlink("/dev/full", path + ".tmp")  # every write to the file being written fails as on a full disk
        save_torch(path, {"model_state_dict": {"weight": torch.zeros(4096)}})
        return path

    run_dir = stub / "runs" / "CartPole-v1__ppo__1__1"
    (run_dir / "videos" / "iteration-2").mkdir(parents=True)
    (run_dir / "videos" / "iteration-2" / "eval-episode-0.mp4").write_bytes(b"an earlier video")
    # a fresh run, no checkpoint saved yet, 25 of its 100 iterations logged (this worker's earlier tests may have
    # saved in this process: a module's runs made in-process; put back after the test)
    FRESH_RUN_FOLDER[:] = [str(run_dir)]
    LOOP_PROGRESS[:] = [25, 100]
    COMPLETED_SAVES.clear()
    with pytest.raises(SystemExit) as stopped:
        VideoJobs(str(run_dir), snapshot_on_a_full_disk).film(26)
    model = run_dir / "videos" / "iteration-26" / "model.cleanrl_model"
    assert stopped.value.code == (
        f"error: could not write {model} (No space left on device, after 0 bytes); no earlier file of that name was "
        f"there; its run folder {run_dir} keeps what 25 iterations logged (its curves, any videos; no checkpoint was "
        "saved). Free space there and run again"
    )
    assert os.listdir(run_dir / "videos") == ["iteration-2"]  # no empty iteration-26 left; the earlier video stays
    # the first video's snapshot: the videos/ folder made for it goes too
    (run_dir / "videos" / "iteration-2" / "eval-episode-0.mp4").unlink()
    (run_dir / "videos" / "iteration-2").rmdir()
    (run_dir / "videos").rmdir()
    with pytest.raises(SystemExit):
        VideoJobs(str(run_dir), snapshot_on_a_full_disk).film(2)
    assert os.listdir(run_dir) == []
