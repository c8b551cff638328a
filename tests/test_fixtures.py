"""The suite's own helpers (tests/conftest.py): a session folder built once for every worker."""

import pytest
from conftest import built_once


class WorkerTemp:
    """A worker's tmp_path_factory as pytest-xdist sets it up: its own folder in the session's."""

    def __init__(self, folder):
        folder.mkdir(parents=True)
        self.folder = folder

    def getbasetemp(self):
        return self.folder


def test_a_session_folder_is_built_once_for_every_worker_and_again_after_a_failed_build(tmp_path, monkeypatch):
    """Mutations tried: building in each worker's own folder (no ``root.parent``) builds twice;
    without the check of a finished build, the second worker builds again; a failed build's
    leftovers kept (no rmtree) make the next worker's build fail."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    first, second = WorkerTemp(tmp_path / "popen-gw0"), WorkerTemp(tmp_path / "popen-gw1")
    calls = []

    def failing(path):
        calls.append("failed")
        (path / "partial").write_text("half")
        raise RuntimeError("the build failed")

    def build(path):
        calls.append("built")
        (path / "summary.json").write_text("{}")

    with pytest.raises(RuntimeError, match="the build failed"):
        built_once(first, "shared", failing)
    assert built_once(second, "shared", build) == built_once(first, "shared", build) == tmp_path / "shared"
    assert calls == ["failed", "built"] and not (tmp_path / "shared" / "partial").exists()
