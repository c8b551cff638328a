"""Lint and format as part of the suite."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def test_ruff_check_and_format_pass():
    """pyproject.toml declared ruff's line length (130) without anything enforcing it, and lines drifted
    past it: ruff check (E501 included) and ruff format --check now fail the suite instead."""
    pytest.importorskip("ruff")  # in the test extra; skipped only where it is not installed
    for command in (["check"], ["format", "--check"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "src", "tests", "benchmarks", "docs"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, f"ruff {' '.join(command)}:\n{result.stdout}{result.stderr}"
