"""A benchmark row names the code that produced it: ``measured_revision`` counts untracked files
and a failing git as not clean, and the pretraining sweep reuses a finished or half-finished run
only when its configuration and its commit are the row's."""

import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import benchmark_module

from sinklab.core.attention import AttentionSpec
from sinklab.core.errors import SinklabError
from sinklab.core.runs import read_run_info, write_json
from sinklab.pretrain import PretrainConfig

COMMIT = "a" * 40  # the commit the tests' run claims to come from


@pytest.fixture(scope="module")
def sweep():
    with benchmark_module("pretrain_sweep") as module:
        yield module


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One finished tiny run (real config.json, checkpoints, summary), its run.json's git set to
    :data:`COMMIT` with no uncommitted changes."""
    root = tmp_path_factory.mktemp("sweep")
    mp = pytest.MonkeyPatch()
    mp.setenv("SINKLAB_CACHE", str(root / "cache"))
    (root / "corpus").mkdir()
    for i in range(4):
        (root / "corpus" / f"doc{i}.txt").write_text(" ".join(f"word{(i * 7 + j) % 13}" for j in range(1500)))
    cfg = PretrainConfig(corpus=str(root / "corpus"), tokenizer="bytes", attention=AttentionSpec("softmax"), d_model=16, n_layers=1, n_heads=2, seq_len=16, batch=4,
                         steps=4, warmup=1, eval_every=2, eval_batches=1, checkpoint_every=2, scan_tokens=8, scan_batch=2, out=str(root / "run"))
    from sinklab.pretrain import train_lm

    train_lm(cfg, progress=False)
    set_git(Path(cfg.out), {"commit": COMMIT, "uncommitted_changes": False})
    yield cfg
    mp.undo()


def set_git(run_dir: Path, git) -> None:
    info = {k: v for k, v in read_run_info(run_dir).items() if k != "git"}
    write_json(run_dir / "run.json", info if git is None else {**info, "git": git})


@pytest.fixture()
def run(trained, tmp_path):
    """A copy of the trained run, free to edit."""
    shutil.copytree(trained.out, tmp_path / "run")
    return replace(trained, out=str(tmp_path / "run"))


def must_not_train(cfg, **kwargs):
    raise AssertionError("a run the sweep could reuse or had to refuse was trained")


@pytest.mark.parametrize("revision", [COMMIT[:7], COMMIT[:7] + "-dirty"])
def test_a_run_of_the_same_configuration_and_commit_is_reused(sweep, run, monkeypatch, revision):
    monkeypatch.setattr(sweep, "REVISION", revision)
    monkeypatch.setattr(sweep, "train_lm", must_not_train)
    assert sweep.train_one(run) == run.out


@pytest.mark.parametrize(
    "change, git, revision, reason",
    [
        ({"lr": 1e-2}, None, COMMIT[:7], r"another configuration \(lr: 0.003 there, 0.01 now\)"),
        ({"seq_len": 8}, None, COMMIT[:7], r"another configuration \(seq_len: 16 there, 8 now\)"),
        ({"seed": 1}, None, COMMIT[:7], r"another configuration \(seed: 0 there, 1 now\)"),
        ({}, None, "bbbbbbb", "it was trained at commit aaaaaaa, and this tree is at bbbbbbb"),
        ({}, None, "unknown-dirty", "it was trained at commit aaaaaaa, and this tree is at unknown"),
        ({}, {"commit": COMMIT, "uncommitted_changes": True}, COMMIT[:7], "it was trained with uncommitted changes, and this row would be stamped clean"),
        ({}, "none", COMMIT[:7], "its run.json records no git commit"),
    ],
    ids=["lr", "length", "seed", "other-commit", "git-failed", "uncommitted-run", "no-commit"],
)
@pytest.mark.parametrize("finished", [True, False], ids=["finished", "half-finished"])
def test_a_stale_run_is_refused_with_the_reason_and_not_trained(sweep, run, monkeypatch, change, git, revision, reason, finished):
    """Mutations tried: comparing only the step count (the former check) reused the lr, length and
    seed runs; without the commit comparison the other-commit and git-failed runs were reused;
    without the uncommitted check the uncommitted run was reused under a clean stamp."""
    if git is not None:
        set_git(Path(run.out), None if git == "none" else git)
    if not finished:
        (Path(run.out) / "summary.json").unlink()  # checkpoints remain: the sweep would resume it
    monkeypatch.setattr(sweep, "REVISION", revision)
    monkeypatch.setattr(sweep, "train_lm", must_not_train)
    with pytest.raises(SinklabError, match=f"holds a run this sweep cannot use: {reason}; pass --rerun-stale"):
        sweep.train_one(replace(run, **change))


def test_rerun_stale_trains_a_stale_run_again_from_scratch(sweep, run, monkeypatch):
    monkeypatch.setattr(sweep, "REVISION", COMMIT[:7])
    calls = []
    monkeypatch.setattr(sweep, "train_lm", lambda cfg, resume, progress: calls.append((cfg.lr, resume, Path(cfg.out).exists())))
    sweep.train_one(replace(run, lr=1e-2), rerun_stale=True)
    assert calls == [(1e-2, False, False)]  # the old run removed, the new one not resumed from it


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture()
def repo(sweep, tmp_path, monkeypatch):
    """A committed checkout standing in for the repository root; the tree starts clean."""
    common = sys.modules["common"]
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "code.py").write_text("x = 1\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "code")
    monkeypatch.setattr(common, "ROOT", root)
    monkeypatch.delenv("SINKLAB_BENCH_ALLOW_DIRTY")
    return root


def test_a_clean_tree_is_recorded_by_its_commit_and_benchmark_outputs_do_not_dirty_it(repo):
    common = sys.modules["common"]
    for written in ("benchmarks/results/speed.jsonl", "runs/sweep/summary.json"):
        (repo / written).parent.mkdir(parents=True, exist_ok=True)
        (repo / written).write_text("{}\n")
    assert common.measured_revision() == git(repo, "rev-parse", "--short", "HEAD")


def test_an_untracked_file_makes_the_tree_dirty(repo, monkeypatch):
    """Mutation tried: ``git status --untracked-files=no`` (the former call) recorded this tree clean."""
    common = sys.modules["common"]
    (repo / "src" / "new_module.py").write_text("y = 2\n")
    with pytest.raises(SystemExit, match="clean tree; uncommitted: src/new_module.py"):
        common.measured_revision()
    monkeypatch.setenv("SINKLAB_BENCH_ALLOW_DIRTY", "1")
    assert common.measured_revision() == git(repo, "rev-parse", "--short", "HEAD") + "-dirty"


def test_a_failing_git_is_not_clean(repo, monkeypatch, tmp_path):
    """Mutation tried: returning "unknown" on a git failure (the former code) recorded the row
    unflagged instead of refusing."""
    common = sys.modules["common"]
    monkeypatch.setattr(common, "ROOT", tmp_path / "not-a-checkout")
    (tmp_path / "not-a-checkout").mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # git must not find a repository above it
    with pytest.raises(SystemExit, match="git cannot say which commit this is"):
        common.measured_revision()
    monkeypatch.setenv("SINKLAB_BENCH_ALLOW_DIRTY", "1")
    assert common.measured_revision() == "unknown-dirty"


def test_sweep_settings_reach_every_run_and_bad_ones_are_one_line_errors(sweep):
    """``--set`` changes every run of the sweep (so a second setting is one command) and refuses
    what the sweep varies or derives itself, an unknown field and a value of the wrong type (a
    JSON true is not an int). Mutations caught: overrides not passed to the configs; seed or
    max_seq_len settable; isinstance in place of the exact type check."""
    overrides = sweep.parse_overrides(["lr=3e-3", "positions=learned", "tie_embeddings=false", "n_layers=3"])
    assert overrides == {"lr": 0.003, "positions": "learned", "tie_embeddings": False, "n_layers": 3}
    configs = sweep.sweep_configs("bb", [0, 1], 2500, ["softmax", "softmax+gate"], overrides)
    assert len(configs) == 4
    for cfg in configs:
        assert (cfg.lr, cfg.positions, cfg.tie_embeddings, cfg.n_layers, cfg.steps) == (0.003, "learned", False, 3, 2500)
    bad_settings = [("seed=3", "KEY one of"), ("max_seq_len=300", "KEY one of"), ("lr", "KEY=VALUE"), ("lr=fast", "takes float values"),
                    ("n_layers=2.5", "takes int values"), ("n_layers=true", "takes int values")]
    for bad, message in bad_settings:
        with pytest.raises(SystemExit, match=message):
            sweep.parse_overrides([bad])
