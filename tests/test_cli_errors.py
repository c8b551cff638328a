"""Bad values on the command line are one line, as every other user mistake (issue 39: ``--keep-sinks
-1``, ``--task mmlu`` and ``--limit quik`` printed argparse's 12-17-line usage before the line that
says what to change), and tqdm's own switch turns sinklab's progress bars off."""

from __future__ import annotations

import pytest

from sinklab import cli
from sinklab.core import progress


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["compress", "--keep-sinks", "-1"], "--keep-sinks takes numbers"),
        (["compress", "--task", "mmlu"], "unknown mmlu; choose from: ppl, passkey"),
        (["bench", "--limit", "quik"], "invalid choice: 'quik'"),
        (["scan", "--tokens", "many"], "argument --tokens"),
        (["stream", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["trigger", "--layers", "x"], "--layers: invalid int value: 'x'"),
        ([], "required: COMMAND"),
    ],
)
def test_a_bad_value_is_one_line_with_exit_status_2(argv, needle, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    err = capsys.readouterr().err
    command = f"sinklab {argv[0]}" if argv else "sinklab"
    assert stop.value.code == 2 and err.count("\n") == 1 and "usage:" not in err, err
    assert err.startswith(f"{command}: error: ") and needle in err and f"`{command} --help`" in err


@pytest.mark.parametrize(
    "argv, shown", [(["compress", "--keep-sinks", "1,\x1b[31mRED"], "got \\x1b[31mRED"), (["stream", "--\x1b[2J"], "--\\x1b[2J")]
)
def test_a_users_escape_codes_are_shown_escaped_not_sent_to_the_terminal(argv, shown, capsys):
    """A bad value or an unknown flag was printed raw: its escape codes recoloured (or cleared) the
    terminal."""
    with pytest.raises(SystemExit):
        cli.main(argv)
    err = capsys.readouterr().err
    assert "\x1b" not in err and shown in err and err.count("\n") == 1, err


def test_help_still_prints_the_usage(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["compress", "--help"])
    assert stop.value.code == 0 and "usage: sinklab compress" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["1", "True", "0", "false", "no", ""])
def test_tqdm_disable_turns_the_bars_off_as_tqdm_reads_it(value, monkeypatch):
    """TQDM_DISABLE was ignored: every bar is made with an explicit ``disable``, which overrides
    tqdm's reading of its environment. Then "0", "false" and "no" kept the bars on, where tqdm
    (its envwrap: ``bool`` of the string) turns them off: the reading is tqdm's own."""
    from tqdm.utils import envwrap

    monkeypatch.setenv("TQDM_DISABLE", value)
    tqdm_reads = envwrap("tqdm")(lambda disable=False: disable)()  # the environment is read when wrapped
    assert tqdm_reads is (value != "")
    with progress.progress_bar(range(3)) as bar:
        assert bar.disable is tqdm_reads
