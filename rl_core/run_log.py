"""The run directory: out.log, logs.csv (one row per log tick), meta.json, TensorBoard events."""

from __future__ import annotations

import csv
import datetime
import json
import logging
import os
import subprocess
import sys

from rl_core import checkpoint

_HERE = os.path.dirname(os.path.abspath(__file__))


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_HERE, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def setup_logging(rundir: str | None) -> None:
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    fmt = logging.Formatter("[%(levelname)s:%(process)d %(name)s %(asctime)s] %(message)s", "%H:%M:%S")
    if not any(getattr(h, "_polybeast", False) for h in root.handlers):
        console = logging.StreamHandler(sys.stderr)
        console.setFormatter(fmt)
        console._polybeast = True
        root.addHandler(console)
    if rundir is not None:
        fh = logging.FileHandler(os.path.join(rundir, "out.log"))
        fh.setFormatter(fmt)
        fh._polybeast = True
        root.addHandler(fh)


class RunLog:
    """Owns the files of one run directory."""

    def __init__(self, rundir: str, flags):
        self.rundir = rundir
        os.makedirs(rundir, exist_ok=True)
        self.csv_path = os.path.join(rundir, "logs.csv")
        self.meta_path = os.path.join(rundir, "meta.json")
        self.fields: list[str] = []
        if os.path.exists(self.csv_path):
            with open(self.csv_path, newline="") as f:
                header = next(csv.reader(f), [])
            self.fields = header
        self.meta = {
            "flags": checkpoint.flags_dict(flags),
            "git_commit": git_commit(),
            "argv": sys.argv,
            "start": datetime.datetime.now().isoformat(timespec="seconds"),
            "end": None,
            "success": None,
        }
        self.write_meta()
        self._tb = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=rundir)
        except ImportError:  # tensorboard is in requirements.txt; keep running without it
            logging.getLogger("run_log").warning("tensorboard is not installed: no event files")

    def write_meta(self, **updates) -> None:
        self.meta.update(updates)
        tmp = self.meta_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.meta, f, indent=2)
        os.replace(tmp, self.meta_path)

    def log_row(self, row: dict) -> None:
        """Append a row to logs.csv; a new column rewrites the file with the wider header."""
        new = [k for k in row if k not in self.fields]
        if new or not os.path.exists(self.csv_path):
            old_rows = []
            if os.path.exists(self.csv_path):
                with open(self.csv_path, newline="") as f:
                    old_rows = list(csv.DictReader(f))
            self.fields = self.fields + new
            tmp = self.csv_path + ".tmp"
            with open(tmp, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=self.fields)
                writer.writeheader()
                writer.writerows(old_rows)
            os.replace(tmp, self.csv_path)
        with open(self.csv_path, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=self.fields).writerow(row)
        if self._tb is not None:
            step = row.get("step", 0)
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and value == value:
                    self._tb.add_scalar(key, value, step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def finish(self, success: bool, reason: str) -> None:
        self.write_meta(end=datetime.datetime.now().isoformat(timespec="seconds"), success=success, reason=reason)
        self.close()
