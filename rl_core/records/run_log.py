"""The run directory: out.log, logs.csv (one row per log tick), meta.json, TensorBoard events."""

from __future__ import annotations

import csv
import datetime
import json
import logging
import os
import re
import subprocess
import sys

from rl_core.errors import UserError

_HERE = os.path.dirname(os.path.abspath(__file__))


def _checkpoint():
    """rl_core.records.checkpoint_file imports torch, which env servers (they import this module) never need."""
    from rl_core.records import checkpoint_file

    return checkpoint_file


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
            "flags": _checkpoint().flags_dict(flags),
            "git_commit": git_commit(),
            "argv": _checkpoint().redact_argv(sys.argv),
            "start": datetime.datetime.now().isoformat(timespec="seconds"),
            "end": None,
            "success": None,
        }
        self.write_meta()
        self.wandb_run = self._init_wandb(flags) if flags.use_wandb else None
        self._tb = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=rundir)
        except ImportError:  # tensorboard is in requirements.txt; keep running without it
            logging.getLogger("run_log").warning("tensorboard is not installed: no event files")

    def _init_wandb(self, flags):
        """A wandb run named and identified by the xpid (so a resumed run continues it)."""
        try:
            import wandb
        except ImportError:
            raise UserError("--use_wandb needs wandb: python -m pip install -r requirements.txt") from None
        run_id = re.sub(r"[^A-Za-z0-9_-]", "-", flags.xpid)[:64]
        try:
            return wandb.init(
                project=flags.project_name or "torchbeast",
                name=flags.xpid,
                id=run_id,
                dir=self.rundir,
                config=_checkpoint().flags_dict(flags),
                resume="allow",
            )
        except Exception as e:  # noqa: BLE001 - wandb raises many kinds
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise UserError(f"wandb could not start ({first[:200]}): log in, or set WANDB_MODE=offline") from None

    def set_summary(self, values: dict) -> None:
        if self.wandb_run is not None:
            for key, value in values.items():
                self.wandb_run.summary[key] = value

    def log_video(self, key: str, path: str, step: int) -> None:
        if self.wandb_run is not None:
            import wandb

            self.wandb_run.log({key: wandb.Video(path, format=path.rsplit(".", 1)[-1])}, step=step)

    def log_scalars(self, values: dict, step: int) -> None:
        """Scalars outside the logs.csv cadence (validation, final test): TensorBoard and wandb."""
        if self._tb is not None:
            for key, value in values.items():
                self._tb.add_scalar(key, value, step)
        if self.wandb_run is not None:
            self.wandb_run.log(dict(values), step=step)

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
        step = row.get("step", 0)
        numbers = {k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float)) and v == v}
        if self._tb is not None:
            for key, value in numbers.items():
                self._tb.add_scalar(key, value, step)
        if self.wandb_run is not None:
            self.wandb_run.log(dict(numbers, step=step), step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None

    def finish(self, success: bool, reason: str) -> None:
        self.write_meta(end=datetime.datetime.now().isoformat(timespec="seconds"), success=success, reason=reason)
        self.close()
