"""Starting the real entry points as processes, and looking at what they leave behind."""

import glob
import importlib.util
import os
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(name: str):
    """``scripts/<name>.py`` imported as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "scripts", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start(module: str, *args: str, output: str, **popen) -> subprocess.Popen:
    """Start ``python -m module args`` from the repo root; stdout and stderr go to ``output``; ``popen``:
    more arguments of ``subprocess.Popen`` (e.g. a ``preexec_fn``)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(output, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, **popen
        )


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def run(module: str, *args: str, output: str, timeout: float = 300, **popen) -> subprocess.CompletedProcess:
    proc = start(module, *args, output=output, **popen)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"{module} did not finish within {timeout} s:\n{read(output)[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, read(output), None)


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.split("/")[2]))
    return found


def server_pids(pid: int) -> list[int]:
    """The launcher's env server processes (not e.g. the git it runs for meta.json)."""
    found = []
    for child in children(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"polybeast_env" in f.read():
                    found.append(child)
        except OSError:
            pass
    return found


def comm(pid: int) -> str:
    """The process's name (/proc/PID/comm; "" once it is gone)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def csv_rows(path: str) -> list[dict]:
    import csv

    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def interrupt(proc: subprocess.Popen, sig=signal.SIGINT) -> None:
    proc.send_signal(sig)


def flag_error_line(capsys, env_pkg, *argv) -> str:
    """The one line a refused command line ends with (argparse exits 2: usage, then ``error: ...``)."""
    import pytest

    from rl_core.runtime.entry import parse_flags

    with pytest.raises(SystemExit) as e:
        parse_flags(env_pkg, list(argv))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].count("error:") == 1
    return err[-1]


def last_line(output: str) -> str:
    return output.strip().splitlines()[-1]


def snapshot(rundir, names=("model.tar", "meta.json")) -> dict:
    """Bytes and mtime of each file of a run directory (what a fault must leave as it was)."""
    return {name: ((rundir / name).read_bytes(), (rundir / name).stat().st_mtime_ns) for name in names}


def sockets_left(tmp_path) -> list[str]:
    """Socket files of a run whose --pipes_basename is unix:<tmp_path>/pipe."""
    return [p for p in os.listdir(tmp_path) if p.startswith("pipe")]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
