"""benchmarks/gpu_suite.py without a GPU and without training: the budget's shares (what fits, what is "skipped:
budget", never more than the budget), its stop of a child at a target or at the end of its share, the tables
read from a synthetic run directory and from the measuring scripts' output, and the whole command with a budget
too small for any stage."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from benchmarks import gpu_suite
from tests.proc_utils import REPO


def args(*argv):
    return gpu_suite.make_parser().parse_args(list(argv))


def test_each_stage_gets_its_share_and_what_does_not_fit_is_skipped():
    a = args()
    # 16 cores, the default 25 minutes: the ceiling's 5 measurements of 5 + 4 s, IMPALA its 12 minutes at most,
    # the 6 agents 75 s each, the PPO runs halves of the rest
    assert gpu_suite.plan(1500, list(gpu_suite.STAGES), a, 16) == {
        "ceiling": 45.0, "impala_pong": 720.0, "agents": 450.0, "ppo_pong": 135.0, "ppo_breakout": 135.0}
    # 2 cores and 100 s: the ceiling (2 measurements) and IMPALA; the agents and PPO do not fit
    assert gpu_suite.plan(100, list(gpu_suite.STAGES), a, 2) == {
        "ceiling": 18.0, "impala_pong": 67.0, "agents": 0.0, "ppo_pong": 0.0, "ppo_breakout": 0.0}
    # IMPALA leaves the agents that fit beside its minimum minute: here 3 of them
    shares = gpu_suite.plan(300, ["impala_pong", "agents"], a, 16)
    assert shares == {"impala_pong": 60.0, "agents": 225.0}
    # PPO alone: an equal part each, or all of it to the first when halves would be too short
    assert gpu_suite.plan(215, ["ppo_pong", "ppo_breakout"], a, 16) == {"ppo_pong": 100.0, "ppo_breakout": 100.0}
    assert gpu_suite.plan(115, ["ppo_pong", "ppo_breakout"], a, 16) == {"ppo_pong": 100.0, "ppo_breakout": 0.0}
    assert set(gpu_suite.plan(5, list(gpu_suite.STAGES), a, 16).values()) == {0.0}
    for budget in range(0, 3000, 7):
        for cores in (2, 16):
            shares = gpu_suite.plan(budget, list(gpu_suite.STAGES), a, cores)
            assert sum(shares.values()) <= max(budget - gpu_suite.MARGIN_S, 0) + 1e-9
            assert all(v == 0 or v >= gpu_suite.TRAIN_MIN_S for s, v in shares.items() if s in gpu_suite.TRAINING)
            assert shares["impala_pong"] <= a.impala_max_s


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


def test_a_child_is_stopped_at_its_target_at_its_budget_or_killed(tmp_path):
    stopper = gpu_suite.Stopper(install=False)
    rundir = str(tmp_path / "run")

    def reached():
        rows = gpu_suite.read_columns(rundir, ("return_last_100",)) if os.path.exists(rundir + "/logs.csv") else []
        return bool(rows) and rows[-1][0] >= 18

    now = time.monotonic()
    ended = gpu_suite.run_child([sys.executable, "-c", CHILD, rundir, "stop"], str(tmp_path / "a.out"), now + 30,
                                now + 40, stopper, reached)
    assert (ended.status, ended.why) == (0, "target") and ended.target_s < 10
    last = gpu_suite.read_columns(rundir, ("return_last_100",))[-1][0]
    assert 18 <= last < 18 + 3 * 200  # stopped within seconds of the row that reached 18, long before its end

    now = time.monotonic()
    ended = gpu_suite.run_child([sys.executable, "-c", CHILD, rundir, "stop"], str(tmp_path / "b.out"), now + 1,
                                now + 20, stopper)
    assert (ended.status, ended.why) == (0, "budget") and ended.seconds < 5
    # a child that ignores SIGINT is killed at its share's end
    now = time.monotonic()
    ended = gpu_suite.run_child([sys.executable, "-c", CHILD, rundir, "ignore"], str(tmp_path / "c.out"), now + 1,
                                now + 2, stopper)
    assert (ended.status, ended.why) == (-signal.SIGKILL, "budget") and ended.seconds < 5
    # the suite's own Ctrl-C reaches the child: "signal"
    stopper._handle(signal.SIGINT, None)
    now = time.monotonic()
    ended = gpu_suite.run_child([sys.executable, "-c", CHILD, rundir, "stop"], str(tmp_path / "d.out"), now + 30,
                                now + 40, stopper)
    assert ended.why == "signal" and ended.seconds < 5


def synthetic_run(rundir, returns, dt=30.0, steps_per_row=200_000):
    """A run directory as the Atari launcher leaves it: meta.json and logs.csv (a row every dt seconds)."""
    os.makedirs(rundir)
    meta = {"argv": [os.path.join(REPO, "torchbeast_atari", "polybeast.py")],
            "flags": {"env": "PongNoFrameskip-v4", "agent": "impala", "rnd": False, "seed": 1, "num_servers": 14,
                      "num_actors": 448, "batch_size": 56, "unroll_length": 20}}
    with open(os.path.join(rundir, "meta.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(rundir, "logs.csv"), "w") as f:
        f.write("step,time,return_last_100,sps\n")
        for i, r in enumerate(returns):
            f.write(f"{(i + 1) * steps_per_row},{(i + 1) * dt},{r},0\n")


def test_tables_from_a_synthetic_run_directory(tmp_path):
    rundir = str(tmp_path / "impala_pong")
    synthetic_run(rundir, ["nan", -20.5, 5.0, 17.9, 18.2, 19.0, 19.5, 20.0])  # 18 first at row 5: 1M steps, 150 s
    result = gpu_suite.training_result(rundir, 18.0)
    assert result["reached_step"] == 1_000_000 and result["reached_train_s"] == 150.0
    assert result["steps"] == 1_600_000 and result["last100"] == 20.0
    assert result["frames_s"] == pytest.approx(1_600_000 / 240 * 4)
    assert result["steady_frames_s"] == pytest.approx(200_000 / 30 * 4)  # the second half of 240 s: rows 4-8
    assert result["layout"] == "14 servers x 32 envs, B=56, T=20"
    ceiling = {"status": "done", "rows": [(1, 3000.0, 12000.0), (16, 7000.0, 28000.0)], "procs": 16,
               "frames_s": 28000.0, "command": "python benchmarks/env_ceiling.py", "date": "d", "machine": "m"}
    impala = {**result, "status": "done", "stopped": "target", "share_s": 720.0, "reached_wall_s": 170.0,
              "command": "python -m torchbeast_atari.polybeast --env PongNoFrameskip-v4", "date": "d", "machine": "m"}
    text = gpu_suite.markdown({"ceiling": ceiling, "impala_pong": impala,
                               "ppo_pong": {"status": "skipped: budget"}}, "m")
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert "| 16 | 7,000 | 28,000 |" in rows
    # steps, step at 18, training and wall minutes, last-100, mean and steady frames/s, their ratio (26,667 /
    # 28,000), 18 within 10 minutes: yes, 0.9 of the ceiling: yes
    assert "| 1,600,000 | 1,000,000 | 2.50 | 2.83 | 20.00 at the end | 26,667 | 26,667 | 0.95 | yes | yes |" in rows
    assert "| PongNoFrameskip-v4 | skipped: budget |" + " |" * 7 in rows
    assert "BreakoutNoFrameskip-v4" not in text

    slow = str(tmp_path / "slow")  # never 18, and slower than 0.9 of the ceiling
    synthetic_run(slow, [-21, -20.0, 3.0], dt=100.0)
    result = {**gpu_suite.training_result(slow, 18.0), "status": "done", "stopped": "budget", "share_s": 300.0,
              "reached_wall_s": None, "command": "c", "date": "d", "machine": "m"}
    assert result["reached_step"] is None
    rows = [line for line in gpu_suite.markdown({"ceiling": ceiling, "impala_pong": result}, "m").splitlines()
            if line.startswith("| 600,000")]
    assert rows == ["| 600,000 | not reached | not reached | not reached | 3.00 at the end | 8,000 | 8,000 | 0.29 "
                    "| no | no |"]


def test_the_measuring_scripts_output_is_read():
    ceiling = textwrap.dedent("""\
        env ceiling: torchbeast_atari PongNoFrameskip-v4 on 2 usable cores; 5 s a measurement; 1 step = 4 frames
        procs    steps/s   frames/s  per proc speed-up
            1        819      3,277       819     1.00
            2      1,169      4,676       584     1.43
        """)
    assert gpu_suite.parse_ceiling(ceiling) == [(1, 819.0, 3277.0), (2, 1169.0, 4676.0)]
    from benchmarks.agents import COLUMNS

    agents = "\n".join(["# benchmarks/agents.py  2026-11-25 16:08  16 cores, learner on cuda", " ".join(COLUMNS),
                        "-" * 40, "impala 28000 112000 20 30.1 10.2 2.95 1.1 1099 1104",
                        "sac_discrete nan nan nan nan 2.0 nan 1.0 846 846", "steps/s, frames/s: a footnote"])
    rows, header = gpu_suite.parse_agents(agents)
    assert header.startswith("# benchmarks/agents.py") and [row[0] for row in rows] == ["impala", "sac_discrete"]
    table = gpu_suite.agents_table({"rows": rows, "header": header, "skipped": ["ppo"], "command": "c"})
    assert "| impala | 28000 | 112000 | 20 | 30.1 | 10.2 | 2.95 | 1.1 | 1099 | 1104 |" in table
    assert "| ppo | skipped: budget |" + " |" * (len(COLUMNS) - 2) in table


def test_a_budget_too_small_for_any_stage_skips_them_all(tmp_path, capsys):
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "benchmarks/gpu_suite.py", "--budget_s", "5", "--savedir",
                          str(tmp_path / "s")], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("gpu_suite: ") and "torch " in lines[0] and "usable cores" in lines[0]
    for stage in gpu_suite.STAGES:
        assert f"[{stage}] skipped: budget" in out.stdout
    md = (tmp_path / "s" / "gpu_suite.md").read_text()
    assert "**ceiling**: skipped: budget" in md and "| BreakoutNoFrameskip-v4 | skipped: budget |" in md
    assert json.loads((tmp_path / "s" / "gpu_suite.json").read_text())["stages"]["agents"]["status"] == \
        "skipped: budget"
    with pytest.raises(SystemExit) as refused:  # refused before anything starts
        gpu_suite.main(["--stages", "ceiling,nope", "--savedir", str(tmp_path / "never")])
    assert refused.value.code == 2 and "--stages ceiling,nope: give some of ceiling," in capsys.readouterr().err
    assert not (tmp_path / "never").exists()
