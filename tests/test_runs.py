"""Run directories: the one policy for an existing --out, the git commit and model facts in
run.json. Hand-made run folders, no model: each case of the policy in milliseconds."""

import json
import shutil
import subprocess
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

import pytest

import sinklab
import sinklab.cli  # every command's capability registered
from sinklab.core import pipeline
from sinklab.core.atomic import write_json
from sinklab.core.claim import NEW, RESUME, claim_run_dir, failed_before_writing, run_differs
from sinklab.core.configs import setting
from sinklab.core.errors import SinklabError
from sinklab.core.provenance import source_revision
from sinklab.core.results import CAPABILITIES, Capability, RunResult, stamped
from sinklab.core.runs import (
    FAILED_CHECK,
    FINISHED,
    config_record,
    fail_run,
    finish_run,
    is_finished,
    read_run_info,
    record_model,
    start_run,
)
from sinklab.trigger import TriggerConfig


@dataclass
class Inputs:
    tokens: int = 64
    bos: str = "auto"


@dataclass
class Config:
    """A config as capabilities declare them: a nested group, a setting that does not change
    results (``query_chunk``), and a migration from version 0 (which called ``tokens``
    ``max_tokens``)."""

    VERSION: ClassVar[int] = 1
    MIGRATIONS: ClassVar[dict] = {
        0: lambda saved: {**saved, "inputs": {("tokens" if k == "max_tokens" else k): v for k, v in saved["inputs"].items()}}
    }

    model: str = "tiny"
    inputs: Inputs = field(default_factory=Inputs)
    query_chunk: int = setting(256, result=False)


CONFIG = Config()


def run_dir(path: Path, config=CONFIG, finished: bool = False) -> Path:
    """A run folder as the pipeline leaves it: run.json, config.json, maybe summary.json (a run
    whose run.json still says running is not finished, even with a summary)."""
    start_run(path)
    write_json(path / "config.json", config_record(config))
    if finished:  # as a run from before run.json had a status (its summary has no kind, so no schema either)
        write_json(path / "summary.json", {"ppl": 1.0})
        write_json(path / "run.json", {k: v for k, v in read_run_info(path).items() if k != "status"})
    return path


def test_a_missing_or_empty_folder_is_new(tmp_path):
    """Mutation tried: treating an existing empty folder as a foreign one (the emptiness test
    dropped) refuses the second call."""
    assert claim_run_dir(tmp_path / "missing", CONFIG) == NEW
    assert claim_run_dir(tmp_path, CONFIG) == NEW


def test_the_same_configuration_is_finished_resumed_or_started_over(tmp_path):
    """Settings declared ``result=False`` (query_chunk) are not compared. Mutations tried:
    returning RESUME without asking ``resumable`` fails the third claim; not removing the
    unfinished run fails the last assert; comparing result=False settings refuses the first."""
    same = replace(CONFIG, query_chunk=64)
    assert claim_run_dir(run_dir(tmp_path / "done", finished=True), same) == FINISHED
    assert claim_run_dir(run_dir(tmp_path / "half"), same, resumable=lambda d: True) == RESUME
    assert claim_run_dir(tmp_path / "half", same, resumable=lambda d: False) == NEW
    assert not (tmp_path / "half").exists()  # started over: the old outputs are gone


def test_another_configuration_is_refused_naming_the_first_differing_key(tmp_path):
    """Mutation tried: comparing only top-level keys with ``==`` names ``inputs`` instead of
    ``inputs.tokens``; skipping the comparison returns FINISHED."""
    path = run_dir(tmp_path / "run", finished=True)
    other = replace(CONFIG, inputs=Inputs(tokens=32))
    with pytest.raises(SinklabError) as refused:
        claim_run_dir(path, other)
    message = str(refused.value)
    assert "inputs.tokens: 64 there, 32 now" in message and "--overwrite" in message and "\n" not in message
    assert (path / "summary.json").exists()  # refused, not removed
    with pytest.raises(SinklabError, match=r"configs\[1\]\.seed: 1 there, 2 now"):
        claim_run_dir(run_dir(tmp_path / "lab", {"configs": [{"seed": 0}, {"seed": 1}]}), {"configs": [{"seed": 0}, {"seed": 2}]})


def test_a_failed_start_that_wrote_nothing_is_taken_over_by_another_configuration(tmp_path):
    """A run that failed or was interrupted before it wrote anything but run.json and config.json
    (a corpus it could not reach) is replaced by a run of another configuration without
    ``--overwrite``, with a warning naming its error; one that wrote anything more, is still running
    or records no status is refused as before, and the other processes of a DDP run (``remove=False``)
    remove nothing. Mutations tried: the check without the status (a running run is replaced);
    without the listing (a failed run's checkpoint is lost); ``status != "running"`` (the status-less
    run is replaced); INTERRUPTED dropped (the interrupted run is refused); the warning given where nothing is removed."""
    other = replace(CONFIG, inputs=Inputs(tokens=32))
    for error in (RuntimeError("could not load the dataset"), KeyboardInterrupt()):
        failed = run_dir(tmp_path / type(error).__name__)
        fail_run(failed, error)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the main process warns, once
            assert claim_run_dir(failed, other, remove=False) == NEW and (failed / "config.json").exists()
        with pytest.warns(UserWarning, match=f"replacing a run of another configuration .*{type(error).__name__}"):
            assert claim_run_dir(failed, other) == NEW
        assert not failed.exists()
    running = run_dir(tmp_path / "running")
    no_status = run_dir(tmp_path / "no_status")
    write_json(no_status / "run.json", {k: v for k, v in read_run_info(no_status).items() if k != "status"})
    checkpointed, measured = run_dir(tmp_path / "checkpointed"), run_dir(tmp_path / "measured")
    for path in (checkpointed, measured):
        fail_run(path, RuntimeError("out of memory"))
    (checkpointed / "ckpt-0000050").mkdir()
    (measured / "metrics.jsonl").write_text("{}\n")
    for path in (running, no_status, checkpointed, measured):
        with pytest.raises(SinklabError, match="holds a run of another configuration"):
            claim_run_dir(path, other)
        assert (path / "config.json").exists()


def test_a_run_half_removed_by_the_main_ddp_process_is_new_to_the_others(tmp_path):
    """The main process removes a failed run of another configuration while the other processes
    claim the same folder: a config.json whose run.json is already gone, or no folder at all, is
    NEW to them, not refused. Mutation tried: the predicate without its missing-run.json clause."""
    half = tmp_path / "half"
    half.mkdir()
    write_json(half / "config.json", config_record(CONFIG))
    other = replace(CONFIG, inputs=Inputs(tokens=32))
    assert claim_run_dir(half, other, remove=False) == NEW
    assert failed_before_writing(tmp_path / "gone")


def test_an_older_config_is_migrated_before_it_is_compared(tmp_path):
    """A config.json of version 0 (no version key, the old spelling) is the same run as today's
    config once migrated; a config.json from a newer sinklab is refused. Mutations tried: not
    calling migrate in claim_run_dir (the old run is refused: "inputs.tokens is not recorded
    there"); applying no migration for version 0 (the same)."""
    old = run_dir(
        tmp_path / "old", {"model": "tiny", "inputs": {"max_tokens": 64, "bos": "auto"}, "query_chunk": 256}, finished=True
    )
    assert claim_run_dir(old, CONFIG) == FINISHED
    with pytest.raises(SinklabError, match="inputs.tokens: 64 there, 32 now"):
        claim_run_dir(old, replace(CONFIG, inputs=Inputs(tokens=32)))
    newer = run_dir(tmp_path / "newer", {**config_record(CONFIG), "config_version": 2}, finished=True)
    with pytest.raises(SinklabError, match="newer sinklab"):
        claim_run_dir(newer, CONFIG)


def test_overwrite_removes_only_a_sinklab_run(tmp_path):
    """Mutation tried: dropping the run.json/config.json test lets --overwrite delete the user's
    folder of notes (the last assert fails)."""
    path = run_dir(tmp_path / "run", finished=True)
    assert claim_run_dir(path, replace(CONFIG, model="other"), overwrite=True) == NEW
    assert not path.exists()
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("keep me")
    for overwrite in (False, True):
        with pytest.raises(SinklabError, match="is not a sinklab run directory"):
            claim_run_dir(notes, CONFIG, overwrite=overwrite)
    assert (notes / "todo.txt").read_text() == "keep me"


def test_overwrite_never_removes_a_link_or_the_current_directory(tmp_path, monkeypatch):
    """Mutation tried: removing the guard on links lets shutil.rmtree raise OSError (a traceback)
    instead of the one-line refusal."""
    path = run_dir(tmp_path / "run", finished=True)
    (tmp_path / "link").symlink_to(path)
    with pytest.raises(SinklabError, match="symbolic link"):
        claim_run_dir(tmp_path / "link", CONFIG, overwrite=True)
    monkeypatch.chdir(path)
    with pytest.raises(SinklabError, match="holds the current directory"):
        claim_run_dir(path, CONFIG, overwrite=True)
    assert (path / "summary.json").exists()


def test_a_failed_numerical_check_is_not_a_finished_run(tmp_path):
    """Mutation tried: ignoring run.json's failed-check entry makes the same command a no-op
    (FINISHED) on a run whose check failed."""
    path = run_dir(tmp_path / "run", finished=True)
    finish_run(path, failed_check="one-pass scores differ")
    assert read_run_info(path)["status"] == FAILED_CHECK
    assert claim_run_dir(path, CONFIG) == NEW
    assert not path.exists()


def test_run_json_merges_model_facts(tmp_path):
    """Mutation tried: replacing the ``model`` entry instead of merging it loses ``device`` at
    the second call."""
    torch = pytest.importorskip("torch")
    path = start_run(tmp_path / "run")
    record_model(path, device="cuda:0", dtype=torch.bfloat16, device_map={"": 0})
    record_model(path, revision="abc123")
    info = read_run_info(path)
    assert info["model"] == {
        "device": "cuda:0",
        "dtype": "bfloat16",
        "device_map": {"": 0},
        "revision": "abc123",
    }  # dtypes as summaries write them
    assert "command" in info and "versions" in info  # what start_run wrote is kept
    assert not [p.name for p in path.iterdir() if p.name.startswith(".")]  # no temporary file left


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_git_commit_of_the_package_checkout(tmp_path):
    """Untracked package files (an installed copy inside some other repository) give nothing;
    a tracked one gives HEAD and whether tracked files changed. Mutations tried: dropping the
    ls-files test records the enclosing repository's commit for the untracked copy; dropping
    ``--untracked-files=no`` calls the clean checkout dirty (its untracked notes); dropping the
    ``-- .`` pathspec calls the code dirty when a file outside the package changed."""
    assert source_revision(tmp_path) is None  # not a checkout
    repo, package = tmp_path / "repo", tmp_path / "repo" / "src" / "sinklab"
    package.mkdir(parents=True)
    git(repo, "init", "-q")
    (package / "__init__.py").write_text("")
    (repo / "README").write_text("x")
    git(repo, "add", "README")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "readme only")
    assert source_revision(package) is None  # sinklab's files are not tracked here
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "package")
    (repo / "notes.txt").write_text("untracked")
    assert source_revision(package) == {"commit": git(repo, "rev-parse", "HEAD"), "uncommitted_changes": False}
    (repo / "README").write_text("a results row appended beside the package")
    assert source_revision(package)["uncommitted_changes"] is False  # only sinklab's own files count
    (package / "__init__.py").write_text("changed = True\n")
    assert source_revision(package)["uncommitted_changes"] is True


def test_run_json_records_the_commit_sinklab_runs_from(tmp_path):
    """When this test runs from a checkout, run.json names its HEAD. Mutation tried: writing
    run.json without the ``git`` entry."""
    package = Path(sinklab.__file__).parent
    expected = source_revision(package)
    if expected is None:
        pytest.skip("sinklab is not imported from a git checkout here")
    assert expected["commit"] == git(package, "rev-parse", "HEAD")
    assert json.loads((start_run(tmp_path / "run") / "run.json").read_text())["git"] == expected


#: config.json files as earlier sinklab wrote them for each kind's default configuration (generated by
#: running the code of the commit each names: eb52954, before config versions; fbc1860^, scan's version 1).
OLD_CONFIGS = json.loads((Path(__file__).parent / "data" / "old_configs.json").read_text())["configs"]
#: The settings a kind needs beyond its defaults, as its old config.json holds them.
REQUIRED = {
    "scan-compare": lambda: {"models": (None, "a-model")},
    "trigger": lambda: {"configs": (TriggerConfig(),)},
    "pretrain-compare": lambda: {"runs": ("runs/a",)},
}


#: Kinds whose earlier default is on purpose another run than today's, with the first difference:
#: a tune run's default tasks are the suite, which the screen of issue 50 changed (its earlier run
#: also judged one order of the choices on splits of rule 1).
NOT_TODAYS = {"tune": "tasks: ['movie_recommendation'] there, ['date_understanding', 'metaphor_bool... now"}


@pytest.mark.parametrize("kind", sorted(CAPABILITIES))
def test_every_kind_reads_the_config_its_earlier_versions_wrote(kind, tmp_path):
    """Every capability's config.json of its previous version (and earlier ones where kept) is the
    same run as today's default once migrated. A kind whose config never changed (no migration)
    reads its own default stamped with the previous version; a kind that bumped its VERSION must
    keep a config.json of the version before in tests/data/old_configs.json. Mutation tried: scan
    back at version 1 without the migration that adds ``layers`` (scans from before --layers
    were refused: "layers is not recorded there"), and the comparison's the same; run_differs
    comparing the migrated dict before it is JSON (the trigger edits' version 0, whose migration
    builds tuples, was refused: "interventions[0].at: (0,) there, [0] now")."""
    cls = CAPABILITIES[kind].config
    today = cls(**REQUIRED.get(kind, dict)())
    version, migrations = getattr(cls, "VERSION", 0), getattr(cls, "MIGRATIONS", {})
    written = [entry["config"] for entry in OLD_CONFIGS if entry["kind"] == kind]
    if not written:
        assert not migrations, f"{kind}: keep a config.json of its version {version - 1} in tests/data/old_configs.json"
        written = [{**config_record(today), "config_version": max(version - 1, 0)}]
    assert max(saved.get("config_version", 0) for saved in written) == max(version - 1, 0), kind
    for saved in written:
        write_json(tmp_path / "config.json", saved)
        assert run_differs(tmp_path, today) == NOT_TODAYS.get(kind), saved.get("config_version", 0)


@pytest.mark.parametrize("kind", ["intervene", "intervene-trigger"])
def test_a_version_0_config_lacking_a_key_it_always_had_is_one_line(kind, tmp_path):
    """An intervention run's version-0 config.json without ``lams`` is refused in one line (it was
    a KeyError traceback for ``sinklab intervene``, and the trigger edits silently took today's
    default lams). Mutation tried: the migrations reading ``saved.get("lams", DEFAULT_LAMS)`` and
    ``saved["lams"]`` again (no error, and a KeyError)."""
    saved = next(entry["config"] for entry in OLD_CONFIGS if entry["kind"] == kind)
    write_json(tmp_path / "config.json", {**{k: v for k, v in saved.items() if k != "lams"}, "edits": {"mask_self": [3]}})
    with pytest.raises(SinklabError, match="^a config.json of version 0 lacks lams: what made the run is unknown$"):
        run_differs(tmp_path, CAPABILITIES[kind].config())


def test_another_commands_run_is_refused_naming_what_it_holds(tmp_path):
    """A run of another kind in --out was compared setting by setting with this command's
    configuration, which named a config version ("written by a newer sinklab") or a missing key
    ("inputs is not recorded there"), never the folder's real content. Its kind is read from
    run.json (recorded from the start), else summary.json, else (an older unfinished run) the
    subcommand run.json's command line names; --overwrite still replaces it. Mutations tried: not
    calling the kind check in claim_run_dir (the intervene run is compared: FINISHED for the same
    settings); reading only summary.json (the unfinished run with the kind in run.json is
    removed and started over: NEW)."""
    finished = run_dir(tmp_path / "finished", finished=True)
    write_json(finished / "summary.json", {"kind": "intervene", "ppl": 1.0})
    with pytest.raises(SinklabError) as refused:
        claim_run_dir(finished, CONFIG, kind="tune")
    assert str(refused.value) == (
        f"{finished} holds an intervene run, not a tune run; choose another --out (or --overwrite to replace it)"
    )
    assert claim_run_dir(finished, CONFIG, kind="intervene") == FINISHED
    unfinished = start_run(tmp_path / "unfinished", kind="intervene")
    write_json(unfinished / "config.json", config_record(CONFIG))
    with pytest.raises(SinklabError, match="holds an intervene run, not a tune run"):
        claim_run_dir(unfinished, CONFIG, kind="tune")
    assert claim_run_dir(unfinished, CONFIG, kind="tune", overwrite=True) == NEW and not unfinished.exists()


def test_an_older_run_of_another_subcommand_is_named_by_its_command_line(tmp_path, monkeypatch):
    """An unfinished run from before run.json recorded its kind (no summary either) is told apart
    by the subcommand of its command line against this process's, when both are ``sinklab``
    commands; the same subcommand, or a process that is not the command (a notebook), goes on to
    the configuration's comparison as before. Mutation tried: comparing the held kind only (the
    old intervene run is started over: NEW)."""
    old = run_dir(tmp_path / "old")
    write_json(old / "run.json", {"command": ["sinklab", "intervene", "--out", str(old)], "status": "running"})
    monkeypatch.setattr("sys.argv", ["/usr/bin/sinklab", "tune", "--out", str(old)])
    with pytest.raises(SinklabError, match=r"holds a `sinklab intervene` run, not a tune run; choose another --out"):
        claim_run_dir(old, CONFIG, kind="tune")
    monkeypatch.setattr("sys.argv", ["/usr/bin/sinklab", "intervene", "--out", str(old)])
    assert claim_run_dir(old, CONFIG, kind="intervene", resumable=lambda d: True) == RESUME
    monkeypatch.setattr("sys.argv", ["ipykernel_launcher.py"])
    assert claim_run_dir(old, CONFIG, kind="tune", resumable=lambda d: True) == RESUME


def failing_capability(measure=None, write_page=None) -> Capability:
    """A capability whose measure (or page) is given: the pipeline around it, no model."""

    def measured(cfg, context):
        return RunResult(stamped("fake", {"model": "tiny"}))

    return Capability(
        "fake",
        Config,
        measure or measured,
        lambda out, result: [],
        tables={},
        write_page=write_page or (lambda out: write_json(out / "report.html", {})),
    )


def test_a_run_that_raises_says_so_in_run_json_and_the_same_command_starts_it_over(tmp_path):
    """A run whose measure raised (an error, Ctrl-C) or whose writing raised after its summary
    stayed "running" in run.json for ever. Now run.json says failed (with the error's first line)
    or interrupted, the error is raised unchanged, a summary written before the failure does not
    make it finished, and the same configuration resumes it or starts it over. Mutations tried:
    the pipeline without its try (status running); is_finished reading only "running" (the run
    failed in its page is FINISHED, skipped)."""
    out = tmp_path / "run"

    def out_of_memory(cfg, context):
        raise RuntimeError("CUDA out of memory\nTried to allocate 2 GiB")

    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        pipeline.run(failing_capability(out_of_memory), CONFIG, out=out)
    info = read_run_info(out)
    assert (info["status"], info["error"], info["kind"]) == ("failed", "RuntimeError: CUDA out of memory", "fake")

    def interrupted(cfg, context):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pipeline.run(failing_capability(interrupted), CONFIG, out=out)
    assert (read_run_info(out)["status"], read_run_info(out)["error"]) == ("interrupted", "KeyboardInterrupt")

    def no_page(run_dir):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        pipeline.run(failing_capability(write_page=no_page), CONFIG, out=out)
    assert (out / "summary.json").exists() and read_run_info(out)["status"] == "failed"
    assert not is_finished(out)
    assert claim_run_dir(out, CONFIG, resumable=lambda d: True, kind="fake") == RESUME
    assert not pipeline.run(failing_capability(), CONFIG, out=out).reused
    assert read_run_info(out)["status"] == "finished" and "error" not in read_run_info(out)
    shutil.rmtree(out)  # a finished "fake" summary has no schema for the session's check of every summary
