"""A benchmark row names the code that produced it: ``measured_revision`` counts untracked files
and a failing git as not clean; the sweep (``sinklab sweep``) reuses a finished or half-finished
run only when its configuration is the sweep's, and its row only when its commit is the row's."""

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import benchmark_module

from sinklab.core.atomic import write_json
from sinklab.core.attention import AttentionSpec
from sinklab.core.errors import SinklabError
from sinklab.core.runs import read_run_info
from sinklab.core.schemas import validate
from sinklab.pretrain import PretrainConfig, SweepConfig, train_lm
from sinklab.pretrain import run as pretrain_run
from sinklab.pretrain.sweep import SweepJob, run_dir, train_one

COMMIT = "a" * 40  # the commit the tests' run claims to come from


@pytest.fixture(scope="module")
def sweep():
    with benchmark_module("pretrain_sweep") as module:
        yield module


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One finished tiny run of a sweep (real config.json, checkpoints, summary) in the directory
    the sweep gives it, its run.json's git set to :data:`COMMIT` with no uncommitted changes: (the
    sweep's config, its root)."""
    root = tmp_path_factory.mktemp("sweep")
    mp = pytest.MonkeyPatch()
    mp.setenv("SINKLAB_CACHE", str(root / "cache"))
    (root / "corpus").mkdir()
    for i in range(4):
        (root / "corpus" / f"doc{i}.txt").write_text(" ".join(f"word{(i * 7 + j) % 13}" for j in range(1500)))
    settings = dict(
        corpus=str(root / "corpus"),
        tokenizer="bytes",
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
    )
    run = PretrainConfig(**settings, attention=AttentionSpec("softmax"), steps=4)
    train_lm(run, run_dir(root / "sweep", run))
    set_git(run_dir(root / "sweep", run), {"commit": COMMIT, "uncommitted_changes": False})
    yield run, root / "sweep"
    mp.undo()


def set_git(run: Path, git) -> None:
    info = {k: v for k, v in read_run_info(run).items() if k != "git"}
    write_json(run / "run.json", info if git is None else {**info, "git": git})


@pytest.fixture()
def run(trained, tmp_path):
    """A copy of the trained run in a sweep directory of its own, free to edit: (its config, the run directory)."""
    cfg, root = trained
    shutil.copytree(root, tmp_path / "sweep")
    return cfg, run_dir(tmp_path / "sweep", cfg)


def sweep_of(cfg: PretrainConfig, rerun_stale: bool = False) -> SimpleNamespace:
    """A one-run sweep whose run is ``cfg`` (a sweep plans runs on its two corpora only; this run
    reads a folder), as check_provenance reads it."""
    return SimpleNamespace(runs=lambda: [cfg], rerun_stale=rerun_stale)


@pytest.mark.parametrize("revision", [COMMIT[:7], COMMIT[:7] + "-dirty"])
def test_a_run_of_the_commit_the_row_is_stamped_with_is_kept(sweep, run, revision):
    cfg, path = run
    sweep.check_provenance(sweep_of(cfg), path.parent, revision)
    assert (path / "summary.json").exists()


@pytest.mark.parametrize(
    "git, revision, reason",
    [
        (None, "bbbbbbb", "it was trained at commit aaaaaaa, and this tree is at bbbbbbb"),
        (None, "unknown-dirty", "it was trained at commit aaaaaaa, and this tree is at unknown"),
        (
            {"commit": COMMIT, "uncommitted_changes": True},
            COMMIT[:7],
            "it was trained with uncommitted changes, and this row would be stamped clean",
        ),
        ("none", COMMIT[:7], "its run.json records no git commit"),
    ],
    ids=["other-commit", "git-failed", "uncommitted-run", "no-commit"],
)
@pytest.mark.parametrize("finished", [True, False], ids=["finished", "half-finished"])
def test_a_run_of_another_commit_is_refused_with_the_reason_or_trained_again(sweep, run, git, revision, reason, finished):
    """Mutations tried: without the commit comparison the other-commit and git-failed runs were
    kept; without the uncommitted check the uncommitted run was kept under a clean stamp; the
    removal skipped under --rerun-stale (the run stays)."""
    cfg, path = run
    if git is not None:
        set_git(path, None if git == "none" else git)
    if not finished:
        (path / "summary.json").unlink()  # checkpoints remain: the sweep would resume it
    with pytest.raises(SinklabError, match=f"holds a run this row cannot use: {reason}; pass --rerun-stale"):
        sweep.check_provenance(sweep_of(cfg), path.parent, revision)
    assert path.exists()
    sweep.check_provenance(sweep_of(cfg, rerun_stale=True), path.parent, revision)
    assert not path.exists()


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"lr": 1e-2}, r"lr: 0.003 there, 0.01 now"),
        ({"seq_len": 8}, r"seq_len: 16 there, 8 now"),
        ({"seed": 1}, r"seed: 0 there, 1 now"),
    ],
    ids=["lr", "length", "seed"],
)
def test_the_sweep_refuses_a_run_of_another_configuration_or_trains_it_again(run, monkeypatch, change, reason):
    """The package's sweep (one pipeline run per job): the same configuration is read back, another
    is refused naming the setting, and --rerun-stale trains it anew; a run interrupted before it
    wrote anything is trained over without it (the ``--out`` policy's exception). Mutations tried:
    train_one ignoring rerun_stale (the third call is refused); without failed_before_writing (the last)."""
    cfg, path = run
    assert (
        train_one(SweepJob(cfg, str(path), False))["final_val_loss"]
        == json.loads((path / "summary.json").read_text())["final_val_loss"]
    )
    with pytest.raises(SinklabError, match=f"another configuration \\({reason}\\).*--rerun-stale"):
        train_one(SweepJob(replace(cfg, **change), str(path), False))
    trained = []
    monkeypatch.setattr(
        pretrain_run,
        "train",
        lambda cfg, out, resume, world, data: trained.append(resume) or (_ for _ in ()).throw(KeyboardInterrupt),
    )
    with pytest.raises(KeyboardInterrupt):
        train_one(SweepJob(replace(cfg, **change), str(path), True))
    assert trained == [False] and not (path / "summary.json").exists()  # the old run removed, the new one not resumed from it
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "run.json"]  # interrupted before writing
    with pytest.raises(KeyboardInterrupt):
        train_one(SweepJob(cfg, str(path), False))  # another configuration, but nothing to lose: trained, not refused
    assert trained == [False, False]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], capture_output=True, text=True, check=True
    ).stdout.strip()


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


def test_sweep_settings_reach_every_run_and_bad_ones_are_one_line_errors(capsys):
    """``--set`` changes every run of the sweep (so a second setting is one command) and refuses
    what the sweep varies or derives itself, an unknown field and a value of the wrong type (a
    JSON true is not an int). Mutations caught: settings not passed to the runs; seed or
    max_seq_len settable; isinstance in place of the exact type check."""
    from sinklab import cli
    from sinklab.cli.args import config_from
    from sinklab.pretrain.sweep import parse_setting

    args = cli.build_parser().parse_args(
        [
            "sweep",
            "--corpus",
            "bb",
            "--seeds",
            "0,1",
            "--steps",
            "2500",
            "--variants",
            "softmax,softmax+gate",
            "--set",
            "lr=3e-3",
            "--set",
            "positions=learned",
            "--set",
            "tie_embeddings=false",
            "--set",
            "n_layers=3",
        ]
    )
    cfg = config_from(SweepConfig, args, settings=dict(args.settings))
    assert cfg.settings == {"lr": 0.003, "positions": "learned", "tie_embeddings": False, "n_layers": 3}
    runs = cfg.runs()
    assert len(runs) == 4
    for run in runs:
        assert (run.lr, run.positions, run.tie_embeddings, run.n_layers, run.steps) == (0.003, "learned", False, 3, 2500)
    bad_settings = [
        ("seed=3", "KEY one of"),
        ("max_seq_len=300", "KEY one of"),
        ("lr", "KEY=VALUE"),
        ("lr=fast", "takes float values"),
        ("n_layers=2.5", "takes int values"),
        ("n_layers=true", "takes int values"),
    ]
    for bad, message in bad_settings:
        with pytest.raises(SinklabError, match=message):
            parse_setting(bad)
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(["sweep", "--set", bad])
        assert message in capsys.readouterr().err
    with pytest.raises(SinklabError, match="--variants: unknown softmax\\+bogus"):
        SweepConfig(corpus="bb", variants=("softmax+bogus",))


def test_sweep_refuses_an_unknown_variant_before_claiming_its_out(tmp_path, capsys):
    from sinklab import cli

    out = tmp_path / "sweep"
    assert cli.main(["sweep", "--corpus", "bb", "--variants", "softmax+bogus", "--out", str(out)]) == 2
    assert "--variants: unknown softmax+bogus" in capsys.readouterr().err
    assert not out.exists()


#: A one-run sweep on Bigram-Backcopy (softmax, seed 0) on a tiny model, 4 steps: a few seconds a run.
TINY_SWEEP = SweepConfig(
    corpus="bb",
    seeds=(0,),
    variants=("softmax",),
    steps=4,
    workers=1,
    settings=dict(
        d_model=16,
        n_layers=1,
        n_heads=2,
        seq_len=16,
        batch=4,
        warmup=1,
        eval_every=2,
        eval_batches=1,
        scan_tokens=8,
        scan_batch=2,
    ),
)


def summary_written(run: Path) -> int:
    return (run / "summary.json").stat().st_mtime_ns


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    """A finished one-run sweep (softmax, seed 0): its root."""
    from sinklab.pretrain import run_sweep

    root = tmp_path_factory.mktemp("tiny-sweep") / "sweep"
    assert len(run_sweep(TINY_SWEEP, root).summary["rows"]) == 1
    return root


def test_a_finished_sweep_takes_more_seeds_and_rerun_stale_trains_another_budget(tiny_sweep, tmp_path):
    """README's workflow: ``sinklab sweep`` then, into the same directory, more seeds (only the new
    run is trained, the finished one kept untouched); another budget is refused by each run, naming
    --rerun-stale, and --rerun-stale trains every run again. Mutation tried: the sweep's root
    comparing its own configuration as any run does (``holds_runs`` off): the added seed is
    refused ("seeds: [0] there, [0, 1] now") and so is --rerun-stale's budget; is_finished
    ignoring run.json's status: the refused budget's second try returns the old comparison."""
    from sinklab.pretrain import run_sweep

    root = tmp_path / "sweep"
    shutil.copytree(tiny_sweep, root)
    seed0 = run_dir(root, TINY_SWEEP.runs()[0])
    kept = summary_written(seed0)
    more = run_sweep(replace(TINY_SWEEP, seeds=(0, 1)), root)
    assert not more.reused and [row["seed"] for row in more.summary["rows"]] == [0, 1] and summary_written(seed0) == kept
    validate(more.summary)
    assert run_sweep(replace(TINY_SWEEP, seeds=(0, 1)), root).reused
    for _ in range(2):  # the root, left running with the old comparison, is not taken for finished
        with pytest.raises(
            SinklabError, match=r"2 of 2 jobs failed.*another configuration \(steps: 4 there, 6 now\).*--rerun-stale"
        ):
            run_sweep(replace(TINY_SWEEP, seeds=(0, 1), steps=6), root)
    assert summary_written(seed0) == kept
    again = run_sweep(replace(TINY_SWEEP, seeds=(0, 1), steps=6, rerun_stale=True), root)
    assert again.summary["steps"] == 6 and len(again.summary["rows"]) == 2 and summary_written(seed0) != kept


def test_a_stale_run_removed_by_the_benchmark_is_trained_again_not_read_back(sweep, tiny_sweep, tmp_path):
    """``pretrain_sweep.py --rerun-stale`` removes a run another commit trained; the sweep then
    trains it and compares anew instead of reading the root's old comparison back (which the row
    would stamp with this commit). Mutation tried: check_provenance leaving the root's
    summary.json: run_sweep returns the old comparison (reused) and trains nothing."""
    from sinklab.pretrain import run_sweep

    root = tmp_path / "sweep"
    shutil.copytree(tiny_sweep, root)
    stale = run_dir(root, TINY_SWEEP.runs()[0])
    set_git(stale, {"commit": COMMIT, "uncommitted_changes": False})
    cfg = replace(TINY_SWEEP, rerun_stale=True)
    sweep.check_provenance(cfg, root, "bbbbbbb")
    result = run_sweep(cfg, root)
    assert (
        not result.reused
        and (stale / "summary.json").exists()
        and read_run_info(stale).get("git") != {"commit": COMMIT, "uncommitted_changes": False}
    )


def test_sweep_table_reads_the_baselines_penalty_and_pairs_by_seed():
    """The printed tables come from the row's runs: softmax's quantization penalties tested against
    zero (four positive seeds: the smallest two-sided sign-flip p, 2/16), and a variant paired with
    softmax on the seeds both ran only."""

    def run(variant, seed, bos, w4):
        return {"variant": variant, "seed": seed, "sink_head_bos_mass_nontrigger": bos, "quant_w4": w4, "val_loss_gap": 0.01}

    rows = [run("softmax", s, 0.9, 0.001 * (s + 1)) for s in range(4)] + [run("softpick", s, 0.1, 0.0) for s in (0, 1, 2, 7)]
    with benchmark_module("sweep_table") as table:
        runs = table.by_seed(rows)
        payoff = table.baseline_payoff(runs)
        paired = table.paired_table(runs)
        sinks = table.sink_table(runs)
    assert payoff[2].startswith("| w4 | +0.00250 (+0.00100 to +0.00400) | 0.125 | 0.0100 |")
    assert len(payoff) == 3  # schemes without values are left out, not printed as zero
    cells = paired[2].split(" | ")  # the variant, the gap to the optimum, copy accuracy (none), the sink head's BOS mass
    assert cells[1] == "+0.0000 (p 1.000; lower in 0 of 3)" and cells[2] == "-"
    assert cells[3] == "-0.80 (p 0.250; lower in 3 of 3)"  # seed 7 has no softmax run to pair with
    assert "| softmax | 0.90 / 0.90 / 0.90 / 0.90 / - | 0.90 | 4 of 4 |" in sinks


def test_sweep_table_shows_natural_text_its_validation_loss_not_bigram_backcopy_columns():
    """A text row has no task optimum, copy or sink head: its first group is the validation loss,
    first-token mass and Sink_1^0.3; a Bigram-Backcopy row (or an older one, recording no corpus)
    keeps the task's columns. Mutation tried: one set of groups for both (the text table's first
    group is four empty columns, and no validation loss)."""
    with benchmark_module("sweep_table") as table:
        text, bb, old = (table.column_groups(c)["the task and the sink"] for c in ("shakespeare", "bb", "not recorded"))
    assert [key for _, key, _ in text] == ["final_val_loss", "first_token_mass_mean", "sink_rate"]
    assert bb == old and [key for _, key, _ in bb][:3] == ["val_loss_gap", "copy_accuracy", "sink_head_bos_mass_nontrigger"]
