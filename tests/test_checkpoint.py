"""Checkpoint writes are atomic: a failed or killed save leaves the previous checkpoint whole."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from rl_core.records import checkpoint_file
from rl_core.errors import UserError
from tests.proc_utils import REPO


class ExplodesWhenPickled:
    def __reduce__(self):
        raise RuntimeError("injected failure in the middle of a save")


def previous(tmp_path):
    path = str(tmp_path / "model.tar")
    payload = {"step": 1, "model_state_dict": {"w": torch.arange(1000, dtype=torch.float32)}}
    checkpoint_file.save(path, payload)
    return path, os.path.getsize(path), payload


def assert_is(path, payload):
    loaded = checkpoint_file.load(path)
    assert loaded["step"] == payload["step"]
    assert torch.equal(loaded["model_state_dict"]["w"], payload["model_state_dict"]["w"])


def leftovers(directory):
    return [name for name in os.listdir(directory) if name != "model.tar"]


def test_a_save_that_fails_while_pickling_keeps_the_previous_checkpoint(tmp_path):
    path, size, payload = previous(tmp_path)
    big = torch.ones(4_000_000)  # 16 MB already written to the temporary file when the failure comes
    with pytest.raises(RuntimeError, match="injected failure"):
        checkpoint_file.save(path, {"step": 2, "model_state_dict": {"w": big}, "z": ExplodesWhenPickled()})
    assert os.path.getsize(path) == size
    assert_is(path, payload)
    assert leftovers(tmp_path) == []


def test_a_save_that_fails_at_the_rename_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path, _, payload = previous(tmp_path)

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_file.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        checkpoint_file.save(path, {"step": 2, "model_state_dict": {"w": torch.zeros(1000)}})
    monkeypatch.undo()
    assert_is(path, payload)
    assert leftovers(tmp_path) == []


WRITER = """
import sys, torch
from rl_core.records import checkpoint_file
payload = {"step": 2, "model_state_dict": {"w": torch.full((50_000_000,), 2.0)}}
print("ready", flush=True)
while True:
    checkpoint_file.save(sys.argv[1], payload)
"""


@pytest.mark.multiprocess
def test_kill_9_while_writing_leaves_a_loadable_checkpoint_and_the_next_run_removes_the_partial_file(tmp_path):
    path, _, payload = previous(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 120
        # kill it while a 200 MB temporary file is being written, not between two saves
        while not any(
            name.endswith(checkpoint_file.TEMP_SUFFIX) and os.path.getsize(tmp_path / name) > 1 << 20
            for name in leftovers(tmp_path)
        ):
            assert time.monotonic() < deadline, "the writer never started a save"
            assert proc.poll() is None, "the writer exited"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    partial = leftovers(tmp_path)
    assert len(partial) == 1 and partial[0].startswith(".model.tar.") and partial[0].endswith(".partial")
    loaded = checkpoint_file.load(path)  # the first checkpoint or a complete second one, never a torn file
    if loaded["step"] == 1:
        assert_is(path, payload)
    else:
        assert loaded["step"] == 2 and torch.equal(loaded["model_state_dict"]["w"], torch.full((50_000_000,), 2.0))
    assert checkpoint_file.remove_partial_writes(str(tmp_path)) == partial
    assert leftovers(tmp_path) == []
    checkpoint_file.load(path)


def test_a_torn_file_is_one_clear_line_not_a_traceback(tmp_path):
    path, size, _ = previous(tmp_path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(UserError, match="cannot be read: it is truncated or not a PyTorch checkpoint; move it away"):
        checkpoint_file.load(path)
