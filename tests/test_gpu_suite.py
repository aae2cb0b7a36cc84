"""benchmarks/gpu_suite.py without a GPU and without training: the budget's shares (what fits, what is "skipped:
budget", never more than the budget), its stop of a child at a target or at the end of its share, the tables
read from a synthetic run directory and from the measuring scripts' output, the splits stage with a fake
launcher, and the whole command with a budget too small for any stage."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from benchmarks import gpu_suite
from benchmarks.gpu import budget, children, stages, tables
from rl_core.records.plot import read_columns
from tests.proc_utils import REPO


def args(*argv):
    return gpu_suite.make_parser().parse_args(list(argv))


def test_each_stage_gets_its_share_and_what_does_not_fit_is_skipped():
    a = args()
    # 16 cores, the default 25 minutes: the ceiling's 5 measurements of 5 + 4 s, the splits 2 x (75 + 20) s, the
    # acting runs 3 x (75 + 20) s and the 6 agents 75 s each, IMPALA what they leave (at most 12 minutes)
    assert budget.plan(1500, list(budget.STAGES), a, 16) == {
        "ceiling": 45.0,
        "impala_pong": 515.0,
        "splits": 190.0,
        "acting": 285.0,
        "agents": 450.0,
        "ppo_pong": 0.0,
        "r2d2_pong": 0.0,
        "ppo_breakout": 0.0,
    }
    # 2 cores and 100 s: the ceiling (2 measurements) and IMPALA; the splits, the agents and PPO do not fit
    assert budget.plan(100, list(budget.STAGES), a, 2) == {
        "ceiling": 18.0,
        "impala_pong": 67.0,
        "splits": 0.0,
        "acting": 0.0,
        "agents": 0.0,
        "ppo_pong": 0.0,
        "r2d2_pong": 0.0,
        "ppo_breakout": 0.0,
    }
    # IMPALA leaves the agents that fit beside its minimum minute: here 3 of them
    shares = budget.plan(300, ["impala_pong", "agents"], a, 16)
    assert shares == {"impala_pong": 60.0, "agents": 225.0}
    # PPO alone: an equal part each, or all of it to the first when halves would be too short
    assert budget.plan(215, ["ppo_pong", "ppo_breakout"], a, 16) == {"ppo_pong": 100.0, "ppo_breakout": 100.0}
    assert budget.plan(115, ["ppo_pong", "ppo_breakout"], a, 16) == {"ppo_pong": 100.0, "ppo_breakout": 0.0}
    assert set(budget.plan(5, list(budget.STAGES), a, 16).values()) == {0.0}
    for budget_s in range(0, 3000, 7):
        for cores in (2, 16):
            shares = budget.plan(budget_s, list(budget.STAGES), a, cores)
            assert sum(shares.values()) <= max(budget_s - budget.MARGIN_S, 0) + 1e-9
            assert all(v == 0 or v >= budget.TRAIN_MIN_S for s, v in shares.items() if s in budget.TRAINING)
            assert shares["impala_pong"] <= a.impala_max_s
            assert shares["splits"] in (0.0, 190.0)
            assert shares["acting"] in (0.0, 285.0)


def test_the_splits_stage_gets_its_two_runs_or_is_skipped():
    a = args("--splits_seconds", "40")
    need = 2 * (40 + budget.STOP_GRACE_S)  # two runs, each with its clean stop's grace
    assert budget.splits_need_s(a) == need == 120.0
    assert budget.plan(200, ["splits"], a, 2) == {"splits": need}  # the CPU check's budget
    assert budget.plan(budget.MARGIN_S + need - 1, ["splits"], a, 2) == {"splits": 0.0}
    # IMPALA gives way to the splits and then to the agents that fit beside its minute
    a = args()
    assert budget.plan(570, ["ceiling", "impala_pong", "splits"], a, 16) == {
        "ceiling": 45.0,
        "impala_pong": 320.0,
        "splits": 190.0,
    }
    assert budget.plan(600, ["impala_pong", "splits", "agents"], a, 16) == {
        "impala_pong": 95.0,
        "splits": 190.0,
        "agents": 300.0,
    }
    # ... but not when the splits do not fit beside its minute: IMPALA takes what is left
    assert budget.plan(200, ["impala_pong", "splits"], a, 16) == {"impala_pong": 185.0, "splits": 0.0}
    # the stage-by-stage recipe's last call: the splits, then PPO halves
    assert budget.plan(570, ["splits", "ppo_pong", "ppo_breakout"], a, 16) == {
        "splits": 190.0,
        "ppo_pong": 182.5,
        "ppo_breakout": 182.5,
    }


CHILD = textwrap.dedent("""
    import os, signal, sys, time
    rundir, ignore = sys.argv[1], sys.argv[2] == "ignore"
    signal.signal(signal.SIGINT, signal.SIG_IGN if ignore else (lambda *_: sys.exit(0)))
    os.makedirs(rundir, exist_ok=True)
    with open(os.path.join(rundir, "logs.csv"), "w") as f:
        f.write("step,time,return_last_100\\n")
        for i in range(1000):
            f.write(f"{i * 100},{i * 0.05},{-21 + 3 * i}\\n")
            f.flush()
            time.sleep(0.05)
""")


@pytest.mark.multiprocess
def test_a_child_is_stopped_at_its_target_at_its_budget_or_killed(tmp_path):
    stopper = children.Stopper(install=False)
    rundir = str(tmp_path / "run")

    def reached():
        rows = read_columns(rundir, ("return_last_100",)) if os.path.exists(rundir + "/logs.csv") else []
        return bool(rows) and rows[-1][0] >= 18

    now = time.monotonic()
    ended = children.run_child(
        [sys.executable, "-c", CHILD, rundir, "stop"], str(tmp_path / "a.out"), now + 30, now + 40, stopper, reached
    )
    assert (ended.status, ended.why) == (0, "target") and ended.target_s < 10
    last = read_columns(rundir, ("return_last_100",))[-1][0]
    assert 18 <= last < 18 + 3 * 200  # stopped within seconds of the row that reached 18, long before its end

    now = time.monotonic()
    ended = children.run_child(
        [sys.executable, "-c", CHILD, rundir, "stop"], str(tmp_path / "b.out"), now + 1, now + 20, stopper
    )
    assert (ended.status, ended.why) == (0, "budget") and ended.seconds < 5
    # a child that ignores SIGINT is killed at its share's end
    now = time.monotonic()
    ended = children.run_child(
        [sys.executable, "-c", CHILD, rundir, "ignore"], str(tmp_path / "c.out"), now + 1, now + 2, stopper
    )
    assert (ended.status, ended.why) == (-signal.SIGKILL, "budget") and ended.seconds < 5
    # the suite's own Ctrl-C reaches the child: "signal"
    stopper._handle(signal.SIGINT, None)
    now = time.monotonic()
    ended = children.run_child(
        [sys.executable, "-c", CHILD, rundir, "stop"], str(tmp_path / "d.out"), now + 30, now + 40, stopper
    )
    assert ended.why == "signal" and ended.seconds < 5


def synthetic_run(rundir, returns, dt=30.0, steps_per_row=200_000):
    """A run directory as the Atari launcher leaves it: meta.json and logs.csv (a row every dt seconds)."""
    os.makedirs(rundir)
    meta = {
        "argv": [os.path.join(REPO, "torchbeast_atari", "polybeast.py")],
        "flags": {
            "env": "PongNoFrameskip-v4",
            "agent": "impala",
            "rnd": False,
            "seed": 1,
            "num_servers": 14,
            "num_actors": 448,
            "batch_size": 56,
            "unroll_length": 20,
        },
    }
    with open(os.path.join(rundir, "meta.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(rundir, "logs.csv"), "w") as f:
        f.write("step,time,return_last_100,sps\n")
        for i, r in enumerate(returns):
            f.write(f"{(i + 1) * steps_per_row},{(i + 1) * dt},{r},0\n")


def test_tables_from_a_synthetic_run_directory(tmp_path):
    rundir = str(tmp_path / "impala_pong")
    synthetic_run(rundir, ["nan", -20.5, 5.0, 17.9, 18.2, 19.0, 19.5, 20.0])  # 18 first at row 5: 1M steps, 150 s
    result = stages.training_result(rundir, 18.0)
    assert result["reached_step"] == 1_000_000 and result["reached_train_s"] == 150.0
    assert result["steps"] == 1_600_000 and result["last100"] == 20.0
    assert result["frames_s"] == pytest.approx(1_600_000 / 240 * 4)
    assert result["steady_frames_s"] == pytest.approx(200_000 / 30 * 4)  # the second half of 240 s: rows 4-8
    assert result["layout"] == "14 servers x 32 envs, B=56, T=20"
    ceiling = {
        "status": "done",
        "rows": [(1, 3000.0, 12000.0), (16, 7000.0, 28000.0)],
        "procs": 16,
        "frames_s": 28000.0,
        "command": "python benchmarks/env_ceiling.py",
        "date": "d",
        "machine": "m",
    }
    impala = {
        **result,
        "status": "done",
        "stopped": "target",
        "share_s": 720.0,
        "reached_wall_s": 170.0,
        "command": "python -m torchbeast_atari.polybeast --env PongNoFrameskip-v4",
        "date": "d",
        "machine": "m",
    }
    text = tables.markdown({"ceiling": ceiling, "impala_pong": impala, "ppo_pong": {"status": "skipped: budget"}}, "m")
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert "| 16 | 7,000 | 28,000 |" in rows
    # steps, step at 18, training and wall minutes, last-100, mean and steady frames/s, their ratio (26,667 /
    # 28,000), 18 within 10 minutes: yes, 0.9 of the ceiling: yes
    assert "| 1,600,000 | 1,000,000 | 2.50 | 2.83 | 20.00 at the end | 26,667 | 26,667 | 0.95 | yes | yes |" in rows
    assert "| PongNoFrameskip-v4 | ppo | skipped: budget |" + " |" * 8 in rows
    assert "BreakoutNoFrameskip-v4" not in text
    # R2D2 on Pong beside it: the step and minutes at which it reached 18, cleanrl's DQN at 10M
    r2d2 = {
        **result,
        "status": "done",
        "stopped": "target",
        "layout": "14 servers x 32 envs, B=8, T=40",
        "date": "d",
        "machine": "m",
    }
    rows = [
        line
        for line in tables.markdown({"ppo_pong": {"status": "skipped: budget"}, "r2d2_pong": r2d2}, "m").splitlines()
        if line.startswith("| PongNoFrameskip-v4 | r2d2")
    ]
    assert rows == [
        "| PongNoFrameskip-v4 | r2d2 | 1,600,000 | 20.00 | 1,000,000 (2.50 min) | 20.25 | 4.00 | 26,667 | "
        "14 servers x 32 envs, B=8, T=40 | target | d, m |"
    ]

    slow = str(tmp_path / "slow")  # never 18, and slower than 0.9 of the ceiling
    synthetic_run(slow, [-21, -20.0, 3.0], dt=100.0)
    result = {
        **stages.training_result(slow, 18.0),
        "status": "done",
        "stopped": "budget",
        "share_s": 300.0,
        "reached_wall_s": None,
        "command": "c",
        "date": "d",
        "machine": "m",
    }
    assert result["reached_step"] is None
    rows = [
        line
        for line in tables.markdown({"ceiling": ceiling, "impala_pong": result}, "m").splitlines()
        if line.startswith("| 600,000")
    ]
    assert rows == [
        "| 600,000 | not reached | not reached | not reached | 3.00 at the end | 8,000 | 8,000 | 0.29 | no | no |"
    ]


FAKE_LAUNCHER = textwrap.dedent("""
    # torchbeast_atari.polybeast's stand-in: meta.json as the launcher writes it (the sizing of a 16-core GPU
    # machine, or of 2 cores, unless the flags are given), logs.csv rows of a fixed speed per layout, then it
    # waits for the suite's SIGINT
    import argparse, json, os, signal, sys, time
    p = argparse.ArgumentParser()
    for name in ("env", "savedir", "xpid"):
        p.add_argument("--" + name)
    p.add_argument("--disable_final_test", action="store_true")
    for name in ("num_servers", "num_actors", "batch_size", "server_splits"):
        p.add_argument("--" + name, type=int)
    p.add_argument("--acting_process", action="store_true", default=None)
    p.add_argument("--acting_processes", type=int, default=1)
    f = p.parse_args(sys.argv[2:])
    sized = {"16": (28, 448, 56, 2), "2": (2, 16, 32, 1)}[sys.argv[1]]
    given = (f.num_servers, f.num_actors, f.batch_size, f.server_splits)
    servers, actors, batch, splits = sized if f.num_servers is None else given
    rundir = os.path.join(f.savedir, f.xpid)
    os.makedirs(rundir)
    flags = {"env": f.env, "agent": "impala", "rnd": False, "seed": 1, "num_servers": servers, "num_actors": actors,
             "batch_size": batch, "server_splits": splits, "unroll_length": 20, "deterministic": False,
             "acting_process": f.acting_process, "acting_processes": f.acting_processes}
    record = {"num_servers": servers, "num_actors": actors, "batch_size": batch, "server_splits": splits,
              "auto": [] if f.num_servers else ["num_servers", "num_actors", "batch_size"], "reason": "",
              "gpu": sys.argv[1] == "16"}
    with open(os.path.join(rundir, "meta.json"), "w") as out:
        json.dump({"argv": [os.path.join(os.getcwd(), "torchbeast_atari", "polybeast.py")], "flags": flags,
                   "sizing": record}, out)
    per_row = {1: 50_000, 2: 60_000}[splits] * (1 if actors > 16 else 0.01)  # agent steps in 4 s
    per_row *= 1 + 0.25 * f.acting_processes if f.acting_process else 1
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    with open(os.path.join(rundir, "logs.csv"), "w") as out:
        out.write("step,time,return_last_100\\n")
        # the first row slow (start-up), then steady
        out.write(f"{int(per_row / 2)},4.0,nan\\n")
        for i in range(1, 8):
            out.write(f"{int(per_row / 2 + i * per_row)},{4.0 + 4 * i},-20.0\\n")
    time.sleep(60)
""")


@pytest.mark.multiprocess
@pytest.mark.parametrize("cores", [16, 2])
def test_the_splits_stage_compares_the_sized_layout_with_the_other(tmp_path, monkeypatch, cores):
    monkeypatch.setattr(stages, "polybeast_cmd", lambda argv: [sys.executable, "-c", FAKE_LAUNCHER, str(cores), *argv])
    savedir = str(tmp_path)
    ctx = stages.Context(
        args("--splits_seconds", "2"), savedir, time.monotonic() + 100, children.Stopper(install=False)
    )
    start = time.monotonic()
    result = stages.stage_splits(ctx, budget.splits_need_s(ctx.args))
    assert time.monotonic() - start < 30
    assert result["status"] == "done", result
    sized, other = result["runs"]
    assert sized["sized"] and not other["sized"]
    assert "--num_servers" not in sized["command"] and "--server_splits" not in sized["command"]
    if cores == 16:  # the sizing split: the same 448 envs and batch unsplit, 14 processes of 32
        assert (sized["layout"], other["layout"]) == ("14 x 2 x 16", "14 x 1 x 32")
        assert other["command"].endswith("--num_servers 14 --num_actors 448 --batch_size 56 --server_splits 1")
        assert os.path.isdir(os.path.join(savedir, "splits_h1"))
    else:  # no split on 2 cores: the same 16 envs split explicitly
        assert (sized["layout"], other["layout"]) == ("2 x 1 x 8", "2 x 2 x 4")
        assert other["command"].endswith("--num_servers 4 --num_actors 16 --batch_size 32 --server_splits 2")
        assert os.path.isdir(os.path.join(savedir, "splits_h2"))
    assert "--savedir SAVEDIR --xpid splits_sized" in sized["command"] and savedir not in sized["command"]
    # frames/s of the second half (rows of 4 s from 16 s on), the split's 60k agent steps a row against 50k
    scale = 1 if cores == 16 else 0.01
    split, unsplit = (sized, other) if cores == 16 else (other, sized)
    assert split["steady_frames_s"] == pytest.approx(60_000 * scale / 4 * 4)
    assert unsplit["steady_frames_s"] == pytest.approx(50_000 * scale / 4 * 4)

    ceiling = {"status": "done", "frames_s": 80_000.0 * scale}
    rows = [
        line for line in tables.splits_table({**result, "date": "d", "machine": "m"}, ceiling) if line.startswith("| ")
    ]
    if cores == 16:
        assert rows[1:] == [
            "| 14 x 2 x 16 | 448, B=56 | the sizing's | 60,000 | 1.20 | 0.75 |",
            "| 14 x 1 x 32 | 448, B=56 | given | 50,000 | 1.00 | 0.62 |",
        ]
    else:
        assert rows[1:] == [
            "| 2 x 1 x 8 | 16, B=32 | the sizing's | 500 | 1.00 | 0.62 |",
            "| 2 x 2 x 4 | 16, B=32 | given | 600 | 1.20 | 0.75 |",
        ]


@pytest.mark.multiprocess
def test_the_acting_stage_compares_acting_in_the_learner_process_with_acting_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(stages, "polybeast_cmd", lambda argv: [sys.executable, "-c", FAKE_LAUNCHER, "16", *argv])
    savedir = str(tmp_path)
    ctx = stages.Context(
        args("--acting_seconds", "2", "--acting_counts", "1,2"),
        savedir,
        time.monotonic() + 100,
        children.Stopper(install=False),
    )
    start = time.monotonic()
    result = stages.stage_acting(ctx, budget.acting_need_s(ctx.args))
    assert time.monotonic() - start < 45
    assert result["status"] == "done", result
    first, one, two = result["runs"]
    assert [r["acting_processes"] for r in result["runs"]] == [0, 1, 2]  # a GPU run's default acts in-process
    assert "--acting_process" not in first["command"] and "--num_servers" not in first["command"]
    assert one["command"].endswith("--acting_process --acting_processes 1")
    assert two["command"].endswith("--acting_process --acting_processes 2")
    assert "--savedir SAVEDIR --xpid acting_p2" in two["command"]
    rows = [
        line
        for line in tables.markdown({"acting": {**result, "date": "d", "machine": "m"}}, "m").splitlines()
        if line.startswith("| ")
    ]
    # the sizing's 14 x 2 x 16 every time; 60k agent steps a row in the learner process, 75k and 90k with 1 and 2
    assert rows[1:] == [
        "| 14 x 2 x 16 | 448, B=56 | in the learner process | 60,000 | 1.00 | - |",
        "| 14 x 2 x 16 | 448, B=56 | 1 acting process | 75,000 | 1.25 | - |",
        "| 14 x 2 x 16 | 448, B=56 | 2 acting processes | 90,000 | 1.50 | - |",
    ]
    # on a CPU learner the package's defaults already act in a process of their own
    assert (
        stages.acting_processes(
            {"acting_process": None, "acting_processes": 1, "deterministic": False, "num_servers": 2}, gpu=False
        )
        == 1
    )
    assert (
        stages.acting_processes(
            {"acting_process": None, "acting_processes": 1, "deterministic": False, "num_servers": 2}, gpu=True
        )
        == 0
    )


def test_the_splits_table_without_a_ceiling_or_a_second_run():
    split = {
        "sized": True,
        "status": "done",
        "command": "python -m torchbeast_atari.polybeast --env P",
        "layout": "14 x 2 x 16",
        "num_servers": 28,
        "num_actors": 448,
        "batch_size": 56,
        "server_splits": 2,
        "steady_frames_s": 60_000.0,
    }
    failed = {"sized": False, "status": "failed (exit status 1): boom", "command": "c --server_splits 1"}
    r = {"status": failed["status"], "runs": [split, failed], "seconds": 75.0, "date": "d", "machine": "m"}
    text = tables.markdown({"splits": r}, "m")
    assert "| 14 x 2 x 16 | 448, B=56 | the sizing's | 60,000 | - | - |" in text  # no unsplit run, no ceiling
    assert "| - | - | given | failed (exit status 1): boom | - | - |" in text
    assert "**Split env servers** (`--server_splits`, IMPALA Pong, 75 s a run) (d, m)" in text
    assert "; failed (exit status 1): boom" in text
    # the other layout: unsplit where the sizing split, split in 2 where it did not, neither where envs do not divide
    sized = {"num_servers": 28, "num_actors": 448, "batch_size": 56, "server_splits": 2}
    assert stages.other_layout(sized)[0] == {**sized, "num_servers": 14, "server_splits": 1}
    assert stages.other_layout({**sized, "num_servers": 14, "server_splits": 1})[0] == sized
    assert stages.other_layout({**sized, "num_servers": 3, "num_actors": 9, "server_splits": 1})[0] is None


def test_the_measuring_scripts_output_is_read():
    ceiling = textwrap.dedent("""\
        env ceiling: torchbeast_atari PongNoFrameskip-v4 on 2 usable cores; 5 s a measurement; 1 step = 4 frames
        procs    steps/s   frames/s  per proc speed-up
            1        819      3,277       819     1.00
            2      1,169      4,676       584     1.43
        """)
    assert stages.parse_ceiling(ceiling) == [(1, 819.0, 3277.0), (2, 1169.0, 4676.0)]
    from benchmarks.agents import COLUMNS

    agents = "\n".join(
        [
            "# benchmarks/agents.py  2026-11-25 16:08  16 cores, learner on cuda",
            " ".join(COLUMNS),
            "-" * 40,
            "impala 28000 112000 20 30.1 10.2 2.95 1.1 1099 1104",
            "sac_discrete nan nan nan nan 2.0 nan 1.0 846 846",
            "steps/s, frames/s: a footnote",
        ]
    )
    rows, header = stages.parse_agents(agents)
    assert header.startswith("# benchmarks/agents.py") and [row[0] for row in rows] == ["impala", "sac_discrete"]
    table = tables.agents_table({"rows": rows, "header": header, "skipped": ["ppo"], "command": "c"})
    assert "| impala | 28000 | 112000 | 20 | 30.1 | 10.2 | 2.95 | 1.1 | 1099 | 1104 |" in table
    assert "| ppo | skipped: budget |" + " |" * (len(COLUMNS) - 2) in table
    # an agent asked for but not measured (agents.py failed on it) says why, not "budget"
    failed = tables.agents_table(
        {
            "rows": rows,
            "header": header,
            "skipped": [],
            "command": "c",
            "unmeasured": {"r2d2": "failed (exit status 1): RunFailure: x"},
        }
    )
    assert "| r2d2 | failed (exit status 1): RunFailure: x |" + " |" * (len(COLUMNS) - 2) in failed


@pytest.mark.multiprocess
def test_a_budget_too_small_for_any_stage_skips_them_all(tmp_path, capsys):
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run(
        [sys.executable, "benchmarks/gpu_suite.py", "--budget_s", "5", "--savedir", str(tmp_path / "s")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("gpu_suite: ") and "torch " in lines[0] and "usable cores" in lines[0]
    for stage in budget.STAGES:
        assert f"[{stage}] skipped: budget" in out.stdout
    md = (tmp_path / "s" / "gpu_suite.md").read_text()
    assert "**ceiling**: skipped: budget" in md and "| BreakoutNoFrameskip-v4 | ppo | skipped: budget |" in md
    assert "| PongNoFrameskip-v4 | r2d2 | skipped: budget |" in md
    assert (
        json.loads((tmp_path / "s" / "gpu_suite.json").read_text())["stages"]["agents"]["status"] == "skipped: budget"
    )
    with pytest.raises(SystemExit) as refused:  # refused before anything starts
        gpu_suite.main(["--stages", "ceiling,nope", "--savedir", str(tmp_path / "never")])
    assert refused.value.code == 2 and "--stages ceiling,nope: give some of ceiling," in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("counts", ["0", "1,x", ","])
def test_acting_counts_that_are_not_numbers_of_processes_are_one_line(counts, capsys):
    with pytest.raises(SystemExit) as exit_:
        gpu_suite.main(["--stages", "acting", "--acting_counts", counts])
    assert exit_.value.code == 2
    assert f"--acting_counts {counts}: give numbers of acting processes" in capsys.readouterr().err
