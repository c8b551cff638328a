"""``--launcher``: the many-job commands hand their jobs to submitit (its local cluster runs them as
subprocesses through the same pickling path as Slurm) or to a local Ray of 2 CPUs, and get the
local pool's results back: the same records, the same resume rule, and on every engine, the pool
included, failures that keep the others.

The tests that run jobs on submitit or Ray are marked ``integration`` (``make test-integration``;
CI runs them after ``make test``): each starts an engine or its worker processes."""

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import one_line_error
from launcher_jobs import fail_two_jobs, finish_after_the_next_is_saved, square_and_niceness, visible_gpus

from sinklab import cli
from sinklab.cli.args import add_launcher_arguments, config_from, launcher_settings
from sinklab.core.cluster import PortableJob
from sinklab.core.errors import SinklabError
from sinklab.core.launchers import LOG_DIR, LauncherSettings, launch
from sinklab.models.hf import LoadOptions
from sinklab.pretrain import SweepConfig, run_sweep

NEEDS_RAY = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="ray is not installed (pip install 'sinklab[ray]'): its launcher is untested here",
)
SUBMITIT_LOCAL = {"launcher": "slurm", "cluster": "local", "timeout_min": 10}
ENGINES = {"submitit-local": SUBMITIT_LOCAL, "ray": {"launcher": "ray"}}
#: Every engine, the pool included: (settings, workers); the pool with one worker runs the jobs in this process.
EVERY_ENGINE = {
    "pool": ({"launcher": "local"}, 2),
    "pool-in-process": ({"launcher": "local"}, 1),
    **{name: (settings, 2) for name, settings in ENGINES.items()},
}


def engine_params(names) -> list:
    """``names`` of EVERY_ENGINE as test parameters: a real engine's (submitit, Ray) marked
    ``integration``, Ray's skipped where ray is not installed."""
    return [
        pytest.param(name, marks=[pytest.mark.integration, NEEDS_RAY] if name == "ray" else [pytest.mark.integration])
        if name in ENGINES
        else name
        for name in names
    ]


#: Softmax 1x1 on a small task at a learning rate that converges in a few hundred steps: seed 1
#: stops before the budget (242), seed 0 at it (290), so a result saved under the other seed shows.
TRIGGER = [
    "trigger",
    "--n-layers",
    "1",
    "--n-heads",
    "1",
    "--attn",
    "softmax",
    "--seeds",
    "0-1",
    "--n",
    "4",
    "--length",
    "6",
    "--eval-trigger",
    "3",
    "--lr",
    "0.01",
    "--max-steps",
    "290",
    "--eval-sequences",
    "100",
    "--workers",
    "2",
    "--quiet",
]
TIMING = ("train_seconds", "tokens_per_s")  # wall-clock figures: the only fields allowed to differ


def config_file(tmp_path: Path, settings: dict) -> str:
    path = tmp_path / "launcher.json"
    path.write_text(json.dumps(settings))
    return str(path)


def records(run: Path) -> dict:
    """Every saved record of a trigger run, timing left out, with its model's bytes."""
    found = {}
    for path in sorted((run / "records").glob("*.json")):
        record = {k: v for k, v in json.loads(path.read_text())["record"].items() if k not in TIMING}
        found[path.stem] = (record, (run / "models" / f"{path.stem}.safetensors").read_bytes())
    return found


@pytest.fixture(scope="module")
def pool_trigger(tmp_path_factory):
    """The local pool's trigger sweep (two processes: the one real command whose jobs go through
    the pool's processes), the reference every launcher must equal."""
    out = tmp_path_factory.mktemp("pool") / "run"
    assert cli.main([*TRIGGER, "--out", str(out)]) == 0
    found = records(out)
    assert len(found) == 2 and len({rec["steps"] for rec, _ in found.values()}) > 1  # stopping steps that tell seeds apart
    return out, found


@pytest.mark.integration
def test_a_run_resumed_under_another_launcher_reruns_only_the_missing_job(pool_trigger, tmp_path):
    """A pool's run killed before its last model was saved (its files and summary.json deleted),
    resumed through submitit: one job runs, the others stay, and the job's record and model are
    the pool's. This is the trigger sweep's real submitit job (the Bigram-Backcopy sweep's is Ray's,
    below): launch() is one path for every command, and a job more costs a process's start and
    torch's import. Mutations tried: training every config in run_grid (not only those without a
    saved record) submits two jobs instead of one; handing each result to ``on_result`` with the
    next job (``jobs[(i + 1) % len(jobs)]``) fails the failed-job tests of the pool, in and out of
    process (and the job-order tests, at their deadline)."""
    out = tmp_path / "run"
    shutil.copytree(pool_trigger[0], out)
    for sub, suffix in (("records", "json"), ("models", "safetensors"), ("maps", "safetensors")):
        (out / sub / f"softmax_1x1_seed1.{suffix}").unlink()
    (out / "summary.json").unlink()
    kept = {path.name: path.stat().st_mtime_ns for path in (out / "records").iterdir()}
    config = config_file(tmp_path, SUBMITIT_LOCAL)
    assert cli.main([*TRIGGER, "--out", str(out), "--launcher-config", config, "--cpus-per-job", "1"]) == 0
    assert len(list((out / LOG_DIR).glob("*_submitted.pkl"))) == 1
    assert all((out / "records" / name).stat().st_mtime_ns == mtime for name, mtime in kept.items())
    assert records(out) == pool_trigger[1]
    assert json.loads((out / "run.json").read_text())["launcher"]["launcher"] == "slurm"


def test_submitit_is_given_every_launcher_setting(monkeypatch, tmp_path):
    """What a Slurm job asks for reaches submitit's executor in submitit's names (stopped there:
    nothing is submitted). Mutations tried: timeout_min left out of the parameters (submitit's
    default, 5 minutes, would kill an hour-long job), cpus_per_task taken from the pool instead
    of --cpus-per-job, gpus_per_node fixed at 0: each fails."""
    import submitit

    class Stop(Exception):
        pass

    given = {}

    def update_parameters(self, **parameters):
        given.update(parameters)
        raise Stop

    monkeypatch.setattr(submitit.AutoExecutor, "update_parameters", update_parameters)
    settings = LauncherSettings(
        launcher="slurm",
        cluster="local",
        timeout_min=7,
        cpus_per_job=3,
        gpus_per_job=1,
        partition="cpu",
        array_parallelism=2,
        slurm_extra={"account": "lab"},
    )
    with pytest.raises(Stop):
        launch(str, [1, 2, 3], settings, tmp_path)
    assert given == {
        "name": "sinklab",
        "timeout_min": 7,
        "cpus_per_task": 3,
        "gpus_per_node": 1,
        "slurm_partition": "cpu",
        "slurm_array_parallelism": 2,
        "slurm_additional_parameters": {"account": "lab"},
    }


#: The Bigram-Backcopy sweep's softmax run (seed 0) on a tiny model, 4 steps: one job (the job
#: order and the failure rule on Ray have their own tests below; each job more costs a worker's
#: start and torch's import).
TINY_BB = SweepConfig(
    corpus="bb",
    seeds=(0,),
    variants=("softmax",),
    steps=4,
    workers=2,
    settings=dict(
        d_model=16,
        n_layers=1,
        n_heads=2,
        seq_len=16,
        batch=4,
        warmup=1,
        eval_every=2,
        eval_batches=1,
        checkpoint_every=2,
        scan_tokens=8,
        scan_batch=2,
    ),
)


def sweep_rows(result) -> list:
    return [{k: v for k, v in row.items() if k not in TIMING and k != "run"} for row in result.summary["rows"]]


@pytest.fixture(scope="module")
def pool_sweep(tmp_path_factory):
    result = run_sweep(TINY_BB, tmp_path_factory.mktemp("pool-bb"))
    assert len(result.summary["rows"]) == 1 and result.summary["rows"][0]["first_token_mass_mean"] is not None
    return sweep_rows(result)


# every engine but Ray, which starts once for its tests (TestOnARunningRay, at the end)
@pytest.mark.parametrize("engine", engine_params(name for name in EVERY_ENGINE if name != "ray"))
def test_a_failed_job_is_reported_with_its_log_and_the_others_are_kept(engine, tmp_path):
    """Every engine, the pool included: each failed job named with its log (a SinklabError by its
    own one line, another error by its type and first line), the others' results handed to
    on_result and kept. Mutations tried: the pool raising at its first failure (as it did), or
    in-process, loses job 3's result; failure_line writing SinklabError's type (as other errors)
    fails the pool and Ray, _error_line doing so fails submitit; _error_line taking the trace's last
    line ("second line") fails submitit."""
    settings, workers = EVERY_ENGINE[engine]
    check_failures_are_collected(LauncherSettings(**settings), workers, tmp_path)


def check_failures_are_collected(settings: LauncherSettings, workers: int, tmp_path: Path) -> None:
    saved = {}
    with pytest.raises(SinklabError) as failure:
        launch(
            fail_two_jobs,
            [0, 1, 2, 3],
            settings,
            tmp_path,
            workers=workers,
            label=lambda x: f"job{x}",
            on_result=saved.__setitem__,
        )
    assert saved == {0: 0, 3: 9}
    message = str(failure.value)
    assert "\n" not in message and message.startswith("2 of 4 jobs failed")
    assert "job1: job 1: no such file, on purpose (log: " in message
    assert "job2: ValueError: job 2 fails on purpose (log: " in message
    logs = [Path(part.split(")")[0]) for part in message.split("(log: ")[1:]]
    assert len(logs) == 2 and all(log.parent == tmp_path / LOG_DIR for log in logs)
    assert any("ValueError: job 2 fails on purpose" in log.read_text() for log in logs)
    assert any("job 1: no such file, on purpose" in log.read_text() for log in logs)


def test_a_pool_without_a_run_directory_names_failures_without_a_log():
    """Mutation tried: writing the log into the working directory's launcher/ when no run_dir is given."""
    with pytest.raises(SinklabError, match=r"^1 of 2 jobs failed .*: 2: ValueError: job 2 fails on purpose$"):
        launch(fail_two_jobs, [0, 2], workers=1)
    assert not Path(LOG_DIR).exists()


@pytest.mark.parametrize("engine", engine_params(name for name in EVERY_ENGINE if name not in ("ray", "pool-in-process")))
def test_results_come_back_in_job_order_whatever_order_the_jobs_finish(engine, tmp_path):
    """More workers than jobs, the last job finishing first: results in job order, and on_result
    in this process as each job finishes. Mutations tried: storing each result at its finishing
    position (``results[bar.n]`` in launch) returns them reversed on every engine; the pool
    yielding its finishing count as the job's index does too (no other test runs the pool with
    jobs that finish out of order; it times out, as on_result saves the wrong job); on_result not
    called from the jobs' loop leaves every job but the last waiting for it (TimeoutError)."""
    check_job_order(LauncherSettings(**EVERY_ENGINE[engine][0]), tmp_path)


def check_job_order(settings: LauncherSettings, tmp_path: Path) -> None:
    jobs = [(i, 2, str(tmp_path)) for i in range(3)]
    saved = []

    def save(job: tuple, result: int) -> None:
        saved.append(job[0])
        Path(tmp_path, f"saved{job[0]}").touch()

    results = launch(finish_after_the_next_is_saved, jobs, settings, tmp_path, workers=len(jobs), on_result=save)
    assert results == [0, 1, 4] and saved == [2, 1, 0]


LINGERING = """
import os, sys, time
from pathlib import Path
from sinklab.core.launchers import LauncherSettings, launch

def linger(i):  # in the job's process, whose sys.argv is submitit's
    Path(os.environ["LINGER_DIR"], f"job{i}.pid").write_text(str(os.getpid()))
    time.sleep(300)

if __name__ == "__main__":
    launch(linger, [0, 1], LauncherSettings(**{launcher}), sys.argv[1], workers=2)
"""


#: Patches the command's submitit so that a SIGTERM comes while the array is being submitted: after
#: each job's controller starts (its pid recorded), before map_array has returned any handle.
TERMINATED_WHILE_SUBMITTING = """
import signal
import submitit.local.local as local

submit = local.LocalExecutor._submit_command

def submit_then_terminate(self, command):
    job = submit(self, command)
    Path(os.environ["LINGER_DIR"], f"controller{job.job_id}").touch()
    os.kill(os.getpid(), signal.SIGTERM)
    return job

local.LocalExecutor._submit_command = submit_then_terminate
"""


def lingering_command(tmp_path: Path, launcher: dict, patch: str = "") -> subprocess.Popen:
    """A command whose two jobs write their pid and sleep (``patch`` runs before it launches them)."""
    script = tmp_path / "lingering.py"
    script.write_text(LINGERING.replace("{launcher}", repr(launcher)).replace("if __name__", patch + "\nif __name__"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "LINGER_DIR": str(tmp_path)}
    # SIGINT at its default, as in a terminal: a suite started in the background (``cmd &`` without job
    # control) ignores it, and submitit's local controllers, which end their job on SIGINT, inherit that
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    return subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env, preexec_fn=default_sigint)


def start_lingering_jobs(tmp_path: Path, launcher: dict) -> tuple[subprocess.Popen, list[int]]:
    """A lingering command and its jobs' pids, once both jobs run (starting them took up to 69 s
    at a load average of 15-20 on 2 cores)."""
    command = lingering_command(tmp_path, launcher)
    pid_files = [tmp_path / f"job{i}.pid" for i in range(2)]
    deadline = time.monotonic() + 300
    while not all(f.exists() and f.read_text() for f in pid_files):
        assert command.poll() is None and time.monotonic() < deadline, "the jobs never started"
        time.sleep(0.2)
    return command, [int(f.read_text()) for f in pid_files]


def running(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()  # a zombie has finished
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    "launcher, kill, status",
    [
        pytest.param(SUBMITIT_LOCAL, signal.SIGTERM, 128 + signal.SIGTERM, marks=pytest.mark.integration),
        # the status is Ray's own
        pytest.param({"launcher": "ray"}, signal.SIGTERM, None, marks=[pytest.mark.integration, NEEDS_RAY]),
        ({"launcher": "local"}, signal.SIGKILL, -signal.SIGKILL),
    ],
)
def test_a_killed_command_leaves_no_job_running(launcher, kill, status, tmp_path):
    """Killing the submitting command (``kill``, a cancelled batch job) ends its jobs still running,
    instead of leaving them to race a restarted command for the same run directories: an engine's
    array is cancelled on SIGTERM, Ray ends a dead driver's tasks itself (its exit status is Ray's),
    and the local pool's workers end with their parent even under SIGKILL. Mutations tried: without
    the SIGTERM handler the command dies at once and both submitit jobs sleep on; without
    PR_SET_PDEATHSIG both pool workers do."""
    command, jobs = start_lingering_jobs(tmp_path, launcher)
    try:
        command.send_signal(kill)
        assert command.wait(timeout=120) == status or status is None
        assert not still_running(jobs, seconds=30)
    finally:  # a failure leaves no job sleeping on
        for pid in filter(running, jobs):
            os.kill(pid, signal.SIGKILL)


def still_running(pids: list[int], seconds: float) -> list[int]:
    """Those of ``pids`` still running after up to ``seconds`` of waiting for them to end."""
    deadline = time.monotonic() + seconds
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [pid for pid in pids if running(pid)]


@pytest.mark.integration
def test_a_command_killed_while_submitting_leaves_no_job_running(tmp_path):
    """A SIGTERM inside submitit's map_array, when no handle exists yet to cancel, is held until
    the handles are in place, then cancels every job: the command ends with 143 and no job runs on.
    Mutations tried: arming the unwinding handler before map_array (its SystemExit leaves
    map_array with job 0 started and no handle: job 0 sleeps on); no handler during the
    submission (the command dies at once, -15, both jobs sleep on)."""
    command = lingering_command(tmp_path, SUBMITIT_LOCAL, TERMINATED_WHILE_SUBMITTING)

    def controllers() -> list[int]:
        return [int(path.name.removeprefix("controller")) for path in tmp_path.glob("controller*")]

    try:
        assert command.wait(timeout=120) == 128 + signal.SIGTERM
        assert len(controllers()) == 2 and not still_running(controllers(), seconds=30)
        jobs = [int(path.read_text() or 0) for path in tmp_path.glob("job*.pid")]
        assert not [pid for pid in jobs if pid and running(pid)]
    finally:  # a failure leaves no job sleeping on: submitit's controller ends its job on SIGINT
        for pid in filter(running, controllers()):
            os.kill(pid, signal.SIGINT)


@pytest.mark.parametrize("engine", engine_params(ENGINES))
def test_a_launch_gives_the_program_its_own_sigterm_handler_back(engine, tmp_path, monkeypatch):
    """launch() changes SIGTERM's handler only while an engine's jobs run (submitit: to unwind and
    cancel them; ray.init: its own, never given back): a program's own handler (a script's
    clean-up) is back afterwards, whether launch() returned or was left by an error (here on_result
    failing, as a full disk would). Mutations tried: restoring the default handler instead of the
    previous one, never restoring it, restoring it outside the ``finally``, or only on an error
    (submitit); not restoring it after ray.shutdown (Ray).

    The same launch checks that a Ray started here, whatever RAY_ADDRESS names, runs its jobs at
    the pool's priority (one Ray start fewer: each costs 5-7 s here). Mutations tried: ray.init
    without address="local" joins the dead cluster RAY_ADDRESS names and fails (Ray reads
    RAY_ADDRESS, then /tmp/ray's latest cluster, before starting one); without
    RAY_worker_niceness=0 the jobs run at Ray's niceness 15."""

    def own(signum, frame):
        pass

    saved = []

    def save_then_disk_full(job, result):
        saved.append(result)
        raise OSError("no space left on device")

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    settings = LauncherSettings(**ENGINES[engine])
    previous = signal.signal(signal.SIGTERM, own)
    here = os.nice(0)  # the pool's jobs run at the submitting program's priority
    try:
        with pytest.raises(OSError, match="no space left"):
            launch(square_and_niceness, [2, 3], settings, tmp_path / "left", workers=2, on_result=save_then_disk_full)
        assert signal.getsignal(signal.SIGTERM) is own
        assert saved in ([(4, here)], [(9, here)])
        if engine != "ray":  # a launch that returns (a Ray start more would cost 5-7 s; one path there)
            assert launch(square_and_niceness, [2], settings, tmp_path / "ok", workers=2) == [(4, here)]
            assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.integration
def test_a_job_on_cuda_asks_the_engine_for_a_gpu(tmp_path):
    """submitit's local executor shows a job only the GPUs it asked for (CUDA_VISIBLE_DEVICES), as
    Slurm allots them. Mutation tried: gpus_per_node=0 in _submitit_outcomes hides the GPU."""
    settings = LauncherSettings(**SUBMITIT_LOCAL)
    assert launch(visible_gpus, ["cuda", "cpu"], settings.asking_gpu_for("cuda"), tmp_path, workers=2) == ["0", "0"]
    assert settings.asking_gpu_for("cpu") == settings
    assert replace(settings, gpus_per_job=2).asking_gpu_for("cuda:1").gpus_per_job == 2


def working_directory(_) -> str:
    return os.getcwd()


def test_a_portable_job_runs_in_the_submitting_directory(tmp_path, monkeypatch):
    """A worker started elsewhere (a Ray worker, a Slurm job with --chdir) runs the job where it
    was submitted, so relative run directories mean the same. Mutation tried: dropping os.chdir
    from PortableJob.__call__."""
    import torch

    job = PortableJob.of(working_directory, torch.get_num_threads())
    submitted = os.getcwd()
    monkeypatch.chdir(tmp_path)
    assert job(None) == submitted


def torch_threads(_) -> int:
    import torch

    return torch.get_num_threads()


def test_a_job_gets_the_threads_it_was_given_whether_or_not_torch_is_imported_yet():
    """In a worker that has torch (a reused Ray worker, the pool in-process) the threads are set at
    once; in a fresh one they wait in OMP_NUM_THREADS for torch's import, which a job that does
    not use torch never pays. Mutations tried: dropping either branch of use_torch_threads."""
    import torch

    threads = torch.get_num_threads()
    try:
        assert PortableJob.of(torch_threads, 3)(None) == 3
    finally:
        torch.set_num_threads(threads)
    fresh = (  # torch caps what OMP_NUM_THREADS asks at the cores, so one thread: any machine has it
        "from sinklab.core.jobs import use_torch_threads as u; import os, sys; u(1); "
        "print(os.environ['OMP_NUM_THREADS'], 'torch' in sys.modules); import torch; print(torch.get_num_threads())"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "2"}
    ran = subprocess.run([sys.executable, "-c", fresh], env=env, capture_output=True, text=True)
    assert ran.stdout.split() == ["1", "False", "1"], ran.stderr


@pytest.mark.parametrize(
    "flags, settings, needle",
    [
        ([], {"launcher": "pbs"}, "unknown launcher 'pbs'; choose from: local, slurm, ray"),
        ([], {"launcher": "slurm", "queue": "gpu"}, "unknown launcher setting queue"),
        ([], {"launcher": "slurm", "time": "60"}, "launcher setting timeout_min must be a whole number, got '60'"),
        ([], {"time": 5, "timeout_min": 5}, "gives both timeout_min and its old spelling time; keep timeout_min"),
        (["--launcher", "ray", "--ray-address", "127.0.0.1:9"], {}, "--ray-address 127.0.0.1:9: nothing answers there"),
        (["--launcher", "slurm", "--timeout-min", "0"], {}, "--timeout-min must be at least 1, got 0"),
        (["--launcher", "slurm"], "no-submitit", "--launcher slurm needs the submitit package, which is not installed"),
        (
            ["--launcher", "ray"],
            "no-ray",
            "--launcher ray needs the ray package, which is not installed: pip install 'sinklab[ray]'",
        ),
        (["--partition", "gpu"], {}, "--partition do(es) not apply to --launcher local: --partition is for --launcher slurm"),
        (["--launcher", "slurm", "--ray-address", "auto"], {}, "--ray-address is for --launcher ray"),
    ],
)
def test_bad_launcher_settings_are_one_line_before_any_job(flags, settings, needle, tmp_path, capsys, monkeypatch):
    """Mutation tried: dropping check_launcher from launcher_settings lets ``--launcher slurm``
    without submitit start the run: it writes the run directory before launch() refuses; without
    the engine check, ``--partition gpu`` alone trains locally without a word."""
    if isinstance(settings, str):
        monkeypatch.setitem(sys.modules, settings.removeprefix("no-"), None)  # an import of it raises ImportError
        settings = {}
    out = tmp_path / "run"
    config = ["--launcher-config", config_file(tmp_path, settings)] if settings else []
    assert cli.main([*TRIGGER, "--max-steps", "5", *flags, *config, "--out", str(out)]) == 2
    one_line_error(capsys, needle)
    assert not out.exists()


@pytest.mark.parametrize("file_says, flag", [("timeout_min", "--timeout-min"), ("time", "--time")])
def test_flags_override_the_launcher_config_file(file_says, flag, tmp_path):
    """submitit's own name or the old spelling, in the file and on the command line alike.
    Mutations tried: applying the file after the flags keeps the file's time limit; renaming the
    file's old spelling after the flags are merged (in from_dict) refuses the file ("gives both");
    not renaming it refuses it too (unknown setting); no alias note in the help."""
    parser = argparse.ArgumentParser()
    add_launcher_arguments(parser)
    file = config_file(tmp_path, {"launcher": "slurm", "partition": "cpu", file_says: 5, "slurm_extra": {"account": "lab"}})
    args = parser.parse_args(["--launcher-config", file, flag, "7", "--slurm-extra", "mem=16G", "--gpus-per-job", "1"])
    expected = LauncherSettings(
        launcher="slurm", partition="cpu", timeout_min=7, gpus_per_job=1, slurm_extra={"account": "lab", "mem": "16G"}
    )
    assert launcher_settings(args) == expected
    assert "--time: the old spelling, kept as an alias" in " ".join(parser.format_help().split())


def test_load_flags_of_jobs_that_run_elsewhere_are_resolved_there(monkeypatch):
    """A login node without a GPU submits ``--device cuda`` scans: the flags stay as given for the
    jobs to resolve. Mutation: resolving them regardless raises "PyTorch sees no GPU" here."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = argparse.Namespace(device="cuda", dtype="auto", device_map=None, revision=None, trust_remote_code=False)
    assert config_from(LoadOptions, args, LauncherSettings(launcher="slurm")).device == "cuda"
    with pytest.raises(SinklabError, match="no GPU|not available|sees no"):
        config_from(LoadOptions, args)


@pytest.fixture(scope="class")
def running_ray():
    """One local Ray for the tests of its class (a start costs 5-7 s here), as a notebook that
    called ray.init() has: launch() then sends its tasks there and leaves it running. Three CPU
    slots: the job-order test needs its three jobs running at once."""
    import ray

    handler = signal.getsignal(signal.SIGTERM)
    ray.init(address="local", num_cpus=3, include_dashboard=False)
    yield
    ray.shutdown()
    signal.signal(signal.SIGTERM, handler)


@NEEDS_RAY
@pytest.mark.integration
@pytest.mark.usefixtures("running_ray")
class TestOnARunningRay:
    """The failure rule, the job order and a real sweep on a Ray this program already runs (the
    engine's own start and shutdown are tested above: the SIGTERM handler, the niceness)."""

    def test_a_failed_job_is_reported_with_its_log_and_the_others_are_kept(self, tmp_path):
        check_failures_are_collected(LauncherSettings(launcher="ray"), 2, tmp_path)

    def test_results_come_back_in_job_order_whatever_order_the_jobs_finish(self, tmp_path):
        check_job_order(LauncherSettings(launcher="ray"), tmp_path)

    def test_a_bigram_backcopy_sweep_equals_the_local_pool(self, pool_sweep, tmp_path):
        """``sinklab sweep``'s runs as Ray jobs give the local pool's rows, and their logs are Ray's.
        Mutation tried: the sweep handing its jobs to LOCAL instead of its launcher gives the rows
        but no job log under the run directory."""
        import ray

        result = run_sweep(TINY_BB, tmp_path, LauncherSettings(launcher="ray"))
        assert sweep_rows(result) == pool_sweep
        assert any((tmp_path / LOG_DIR).iterdir())
        assert ray.is_initialized()  # launch() left the program's Ray running
