"""benchmarks/suite.py on real runs (CartPole through --package torchbeast_gym, two seeds of a few seconds):
``run`` starts the launcher with nothing but the run's identity and skips what finished, ``table`` summarises the
run directories as computed here from their files, a bad directory is refused in one line, ``collect`` writes each
run's summary from its files and ``render`` the page's region and curves from summaries alone."""

import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess

import numpy as np
import pytest

from tests.proc_utils import REPO, children, csv_rows, last_line, read, run, start, wait_for

SUITE = "benchmarks.suite"
STEPS = 8_000
# passed on after --: a row every 0.2 s, a short final test, greedy validations every 4,000 steps
EXTRA = ["--log_interval", "0.2", "--test_episodes", "5", "--validate_step_every", "4000"]


def suite_run(savedir, output, *seeds: str):
    return run(
        SUITE,
        "run",
        "--package",
        "torchbeast_gym",
        "--envs",
        "CartPole-v1",
        "--agents",
        "impala",
        "--seeds",
        *seeds,
        "--total_steps",
        str(STEPS),
        "--savedir",
        str(savedir),
        "--",
        *EXTRA,
        output=str(output),
        timeout=180,
    )


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """The suite run once: (its savedir, its output)."""
    tmp = tmp_path_factory.mktemp("suite")
    result = suite_run(tmp / "runs", tmp / "out", "1", "2")
    assert result.returncode == 0, result.stdout[-3000:]
    return tmp / "runs", result.stdout


def rundir(savedir, seed):
    return savedir / f"CartPole-v1_impala_seed{seed}"


@pytest.mark.multiprocess
def test_run_passes_only_the_runs_identity_and_skips_finished_runs(suite, tmp_path):
    savedir, out = suite
    pipes = []
    for seed in (1, 2):
        argv = json.loads((rundir(savedir, seed) / "meta.json").read_text())["argv"][1:]
        pipes.append(argv[argv.index("--pipes_basename") + 1])
        assert argv == [
            "--env",
            "CartPole-v1",
            "--agent",
            "impala",
            "--seed",
            str(seed),
            "--xpid",
            f"CartPole-v1_impala_seed{seed}",
            "--savedir",
            str(savedir),
            "--pipes_basename",
            pipes[-1],
            "--total_steps",
            str(STEPS),
            *EXTRA,
        ]
        assert f"CartPole-v1 impala seed {seed}: started, 8,000 steps" in out
        assert f"CartPole-v1 impala seed {seed}: finished, exit status 0" in out
    assert all(re.fullmatch(r"unix:/tmp/suite-\d+-\d", p) for p in pipes) and pipes[0] != pipes[1]

    logs = {seed: (rundir(savedir, seed) / "logs.csv").read_bytes() for seed in (1, 2)}
    again = suite_run(savedir, tmp_path / "again", "1", "2")
    assert again.returncode == 0, again.stdout
    assert again.stdout.count("skipped, finished before") == 2 and "started" not in again.stdout
    assert "2 runs: 0 run, 2 skipped, 0 failed" in again.stdout
    assert logs == {seed: (rundir(savedir, seed) / "logs.csv").read_bytes() for seed in (1, 2)}

    # A final test cut short leaves no final_test.json: the run resumes (at its --total_steps the launcher trains
    # and tests nothing), then --mode test on its model.tar gives the final test the run would have written.
    copy = tmp_path / "copy"
    shutil.copytree(rundir(savedir, 2), rundir(copy, 2))
    (rundir(copy, 2) / "final_test.json").unlink()
    resumed = suite_run(copy, tmp_path / "resumed", "2")
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "seed 2: resumed (logged to step 8,000)" in resumed.stdout and "without final_test.json" in resumed.stdout
    assert "1 run, 0 skipped, 0 failed" in resumed.stdout
    tested, original = (json.loads((rundir(d, 2) / "final_test.json").read_text()) for d in (copy, savedir))
    assert tested["groups"] == original["groups"] and tested["step"] == original["step"]  # greedy, same test seeds

    # Killed before its first checkpoint (logs.csv written, no model.tar): the run starts over, and says so.
    lost = tmp_path / "lost"
    shutil.copytree(rundir(savedir, 2), rundir(lost, 2))
    for name in ("model.tar", "final_test.json"):
        (rundir(lost, 2) / name).unlink()
    over = suite_run(lost, tmp_path / "over", "2")
    assert over.returncode == 0, over.stdout[-3000:]
    assert "seed 2: started over: no model.tar (logs.csv had reached step 8,000)" in over.stdout


@pytest.mark.multiprocess
def test_a_launcher_interrupted_on_its_own_short_of_its_budget_is_left_to_resume_not_tested(tmp_path):
    """A signal to the launcher alone (not to the suite) ends it with status 0 short of --total_steps: the suite
    says so and runs no --mode test on a checkpoint that is not the run's last (it would fail after a long test)."""
    savedir, output = tmp_path / "runs", tmp_path / "out"
    proc = start(
        SUITE, "run", "--package", "torchbeast_gym", "--envs", "CartPole-v1", "--agents", "impala", "--seeds", "3",
        "--total_steps", "50000000", "--savedir", str(savedir), "--", *EXTRA, output=str(output),
    )  # fmt: skip
    try:
        logs = savedir / "CartPole-v1_impala_seed3" / "logs.csv"
        wait_for(lambda: logs.exists() and len(csv_rows(str(logs))) >= 2, 120, "the run's first logs.csv rows")
        (launcher,) = children(proc.pid)
        os.kill(launcher, signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = read(str(output))
    step = int(csv_rows(str(logs))[-1]["step"])
    assert proc.returncode == 0, out[-3000:]
    assert f"seed 3: stopped at step {step:,} of 50,000,000, its launcher interrupted" in out, out[-3000:]
    assert "--mode test" not in out and not (logs.parent / "final_test.json").exists()
    assert (logs.parent / "model.tar").exists()  # the launcher's own checkpoint on SIGINT: the resume's start


def expected_row(savedir, score: float, step_at: int) -> dict:
    """The table's row, computed here from the run directories' logs.csv and final_test.json."""
    runs = []
    for seed in (1, 2):
        rows = csv_rows(str(rundir(savedir, seed) / "logs.csv"))
        steps = [int(r["step"]) for r in rows]
        times = [float(r["time"]) for r in rows]
        returns = [float(r["return_last_100"]) for r in rows]
        first = next((i for i, v in enumerate(returns) if v >= score), None)
        before = [v for s, v in zip(steps, returns) if s <= step_at and not math.isnan(v)]
        final = json.loads((rundir(savedir, seed) / "final_test.json").read_text())["groups"]["test"]["mean"]
        runs.append(
            {
                "step": steps[-1],
                "sps": steps[-1] / times[-1],
                "end": returns[-1],
                "final": final,
                "first": f"{steps[first]:,}" if first is not None else "not reached",
                "minutes": f"{times[first] / 60:.2f}" if first is not None else "not reached",
                "at": before[-1] if before else None,
            }
        )
    ends, finals = [r["end"] for r in runs], [r["final"] for r in runs]
    at = [r["at"] for r in runs if r["at"] is not None]
    steps = [f"{r['step']:,}" for r in runs]
    return {
        "env": "CartPole-v1",
        "agent": "impala",
        "seeds": "1 / 2",
        "agent steps": steps[0] if steps[0] == steps[1] else " / ".join(steps),
        "last-100 return": f"{np.mean(ends):.1f} ± {np.std(ends):.1f}",
        "last-100 per seed": " / ".join(f"{v:.1f}" for v in ends),
        "final test": f"{np.mean(finals):.1f} ± {np.std(finals):.1f}",
        f"step first ≥ {score:g}": " / ".join(r["first"] for r in runs),
        f"minutes to ≥ {score:g}": " / ".join(r["minutes"] for r in runs),
        "agent steps/s": f"{np.mean([r['sps'] for r in runs]):,.0f}",
        "frames/s": f"{np.mean([r['sps'] for r in runs]):,.0f}",  # CartPole: one frame per agent step
        f"last-100 at {step_at:,}": (
            f"{np.mean(at):.1f} ± {np.std(at):.1f}" if len(at) == 2 else f"{at[0]:.1f} (1 of 2 seeds)"
        ),
    }


def markdown_rows(text: str) -> list[dict]:
    lines = [line for line in text.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


@pytest.mark.multiprocess
def test_table_rows_match_the_run_directories(suite, tmp_path):
    savedir, _ = suite
    tops = [
        np.nanmax([float(r["return_last_100"]) for r in csv_rows(str(rundir(savedir, s) / "logs.csv"))]) for s in (1, 2)
    ]
    assert tops[0] != tops[1]
    score = round(sum(tops) / 2, 3)  # between the seeds' best: one seed reaches it, the other does not
    step_at = int(csv_rows(str(rundir(savedir, 1) / "logs.csv"))[1]["step"])  # seed 1's second row
    png = tmp_path / "curves.png"
    result = run(
        SUITE,
        "table",
        str(rundir(savedir, 1)),
        str(rundir(savedir, 2)),
        "--score",
        str(score),
        "--png",
        str(png),
        "--steps_at",
        str(step_at),
        output=str(tmp_path / "out"),
        timeout=120,
    )
    assert result.returncode == 0, result.stdout
    rows = markdown_rows(result.stdout)
    assert rows == [expected_row(savedir, score, step_at)]
    assert "not reached" in rows[0][f"step first ≥ {score:g}"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    assert matplotlib.image.imread(str(png)).shape[2] in (3, 4)


@pytest.mark.multiprocess
def test_bad_directories_and_flags_are_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for path, cause in [(tmp_path / "empty", "has no logs.csv"), (tmp_path / "nowhere", "is not a directory")]:
        result = run(SUITE, "table", str(path), output=str(tmp_path / "out"), timeout=60)
        assert result.returncode == 2
        assert result.stdout.strip().splitlines() == [last_line(result.stdout)]
        assert f"error: {path} {cause}" in result.stdout and "pass run directories (SAVEDIR/XPID)" in result.stdout
    # a flag the launcher refuses stops the suite before any run starts
    result = run(
        SUITE,
        "run",
        "--package",
        "torchbeast_gym",
        "--games",
        "CartPole-v1",
        "--savedir",
        str(tmp_path / "runs"),
        "--",
        "--no_such_flag",
        "1",
        output=str(tmp_path / "out2"),
        timeout=60,
    )
    assert result.returncode == 2 and len(result.stdout.strip().splitlines()) == 1
    assert "unrecognized arguments: --no_such_flag 1" in result.stdout and not (tmp_path / "runs").exists()


def test_a_resumed_runs_rows_keep_its_last_history_and_its_training_seconds():
    """A resume restarts logs.csv's clock and repeats the steps past its checkpoint (here rows of a run stopped at
    step 300, resumed from its checkpoint at 200): the table's steps increase, and its seconds are those behind the
    rows kept (the stretch from 200 to 300 that the resume redid counts once)."""
    from benchmarks.results import load

    rows = [(100, 1.0, 0.1), (200, 2.0, 0.2), (300, 3.0, 0.3), (250, 0.5, 0.4), (350, 1.5, 0.5)]
    assert load.history_with_wall_seconds(rows) == [(100, 1.0, 0.1), (200, 2.0, 0.2), (250, 2.5, 0.4), (350, 3.5, 0.5)]
    # a start killed before its first checkpoint: the run started over, and its seconds are the new start's alone
    lost = [(100, 1.0, 0.1), (200, 2.0, 0.2), (100, 1.5, 0.3), (200, 2.5, 0.4)]
    assert load.history_with_wall_seconds(lost) == [(100, 1.5, 0.3), (200, 2.5, 0.4)]
    assert load.last_history([(100, 1.0), (200, 2.0), (150, 3.0)]) == [(100, 1.0), (150, 3.0)]


def test_a_seed_run_twice_is_counted_as_runs_not_seeds():
    """The legend and the partial means say "runs of k seeds" where a seed was run more than once."""
    from benchmarks.results import groups, load

    def runs(*seeds):
        empty = np.zeros(0)
        return [load.Run("d", "PongNoFrameskip-v4", "impala", s, empty, empty, empty, None, 4) for s in seeds]

    assert groups.count_label(runs(1, 2)) == "2 seeds"
    assert groups.count_label(runs(3)) == "1 seed"
    assert groups.count_label(runs(1, 1)) == "2 runs of 1 seed"
    assert groups.count_label(runs(1, 1, 2)) == "3 runs of 2 seeds"
    assert groups.mean_std([1.0, 3.0], runs(1, 2)) == "2.0 ± 1.0"
    assert groups.mean_std([1.0, 3.0], runs(1, 2, 3)) == "2.0 ± 1.0 (2 of 3 seeds)"
    assert groups.mean_std([1.0, 3.0], runs(1, 1, 2)) == "2.0 ± 1.0 (2 of 3 runs)"
    assert groups.mean_std([], runs(1)) == "-"
    # returns in [-1, 1] (POPGym's, MiniGrid's) keep two decimals
    assert groups.mean_std([0.42, 1.0], runs(1, 2)) == "0.71 ± 0.29"
    assert groups.mean_std([-0.51], runs(1)) == "-0.51"


def test_games_is_envs():
    from benchmarks import suite

    args = suite.make_parser().parse_args(["run", "--games", "PongNoFrameskip-v4", "BreakoutNoFrameskip-v4"])
    assert args.envs == ["PongNoFrameskip-v4", "BreakoutNoFrameskip-v4"]


def collect(runs, out, *more: str):
    """``collect`` of the fixture's run directories in-process: (exit status, stdout + stderr)."""
    import contextlib
    import io

    from benchmarks import suite

    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
        status = suite.main(["collect", *map(str, runs), "--out", str(out), *more])
    return status, text.getvalue()


@pytest.mark.multiprocess
def test_collect_writes_what_the_run_directory_records(suite, tmp_path):
    savedir, _ = suite
    rows = csv_rows(str(rundir(savedir, 1) / "logs.csv"))
    score = float(rows[len(rows) // 2]["return_last_100"])  # reached first at the middle row or before
    status, out = collect([rundir(savedir, 1)], tmp_path / "data", "--machine", "2-core VM", "--score", str(score))
    assert status == 0, out
    path = tmp_path / "data" / "torchbeast_gym" / "CartPole-v1" / "impala_seed1.json"
    assert f"-> {path} (" in out and path.stat().st_size < 8_000
    summary = json.loads(path.read_text())
    meta = json.loads((rundir(savedir, 1) / "meta.json").read_text())
    final = json.loads((rundir(savedir, 1) / "final_test.json").read_text())
    assert {k: summary[k] for k in ("package", "env", "agent", "seed", "label", "xpid", "machine")} == {
        "package": "torchbeast_gym",
        "env": "CartPole-v1",
        "agent": "impala",
        "seed": 1,
        "label": None,
        "xpid": "CartPole-v1_impala_seed1",
        "machine": "2-core VM",
    }
    assert summary["command"] == "python -m torchbeast_gym.polybeast " + shlex.join(meta["argv"][1:])
    assert meta["argv"][0].endswith("torchbeast_gym/polybeast.py") and "--seed 1 " in summary["command"]
    assert summary["git_commit"] == meta["git_commit"] and summary["reason"] == "finished"
    machine = summary["recorded_machine"]
    assert machine["usable_cores"] == meta["sizing"]["cores"] and machine["gpu"] == meta["sizing"]["gpu"]
    assert len(machine["devices"]) == 1 and re.fullmatch(r"cpu, \d+ torch intra-op threads?", machine["devices"][0])
    assert summary["total_steps"] == STEPS and summary["agent_steps"] == int(rows[-1]["step"]) == STEPS
    assert summary["wall_seconds"] == round(float(rows[-1]["time"]), 1)  # one start
    assert summary["steps_per_s"] == round(STEPS / float(rows[-1]["time"]), 1)
    test_runs = [r for r in final["runs"] if r["group"] == "test"]
    assert summary["final_test"] == {
        "mean": final["groups"]["test"]["mean"],
        "std": final["groups"]["test"]["std"],
        "runs": [r["mean_return"] for r in test_runs],
        "episodes": 5,
        "greedy": True,
        "step": STEPS,
    }
    # the greedy validations at the validated model's step, as out.log says them
    logged = re.findall(
        r"validation at step (\d+): mean return (\S+) over 10 episodes", (rundir(savedir, 1) / "out.log").read_text()
    )
    assert summary["validation"]["source"] == "out.log" and logged  # one due while another runs is skipped
    assert summary["validation"]["step"] == [int(s) for s, _ in logged]
    assert summary["validation"]["mean_return"] == [round(float(v), 3) for _, v in logged]
    # fewer rows than CURVE_POINTS: every row kept, the score's first one among them
    curve = summary["curve"]
    assert curve["rows"] == len(rows) and curve["exact_scores"] == [score]
    assert curve["step"] == [int(r["step"]) for r in rows]
    assert curve["time"] == [round(float(r["time"]), 1) for r in rows]
    assert curve["return_last_100"] == [round(float(r["return_last_100"]), 3) for r in rows]


@pytest.mark.multiprocess
def test_collect_falls_back_to_logs_csv_validations_and_refuses_two_runs_on_one_path(suite, tmp_path):
    savedir, _ = suite
    copy = tmp_path / "copy"
    shutil.copytree(rundir(savedir, 2), copy)
    (copy / "out.log").unlink()
    # logs.csv gives a validation in the first row written after it ended (none where the run ended first): one
    # is written into the second row here
    lines = (copy / "logs.csv").read_text().splitlines()
    lines[2] = lines[2].rsplit(",", 1)[0] + ",123.5"
    assert lines[0].endswith(",valid_mean_return")
    (copy / "logs.csv").write_text("\n".join(lines) + "\n")
    status, out = collect([copy], tmp_path / "data", "--label", "no out.log")
    assert status == 0, out
    summary = json.loads((tmp_path / "data/torchbeast_gym/CartPole-v1/impala_seed2_no out.log.json").read_text())
    rows = [r for r in csv_rows(str(copy / "logs.csv")) if r["valid_mean_return"] != "nan"]
    assert 123.5 in summary["validation"]["mean_return"] and summary["label"] == "no out.log"
    assert summary["validation"] == {
        "source": "logs.csv",
        "step": [int(r["step"]) for r in rows],
        "mean_return": [round(float(r["valid_mean_return"]), 3) for r in rows],
    }
    assert summary["recorded_machine"]["devices"] == []
    status, out = collect([rundir(savedir, 2), copy], tmp_path / "twice")
    assert status == 2 and out.count("\n") == 1 and not (tmp_path / "twice").exists()
    assert f"{rundir(savedir, 2)} and {copy} are both" in out and "each with its --label" in out


def test_a_summary_keeps_at_most_curve_points_rows_and_each_scores_first_row():
    from benchmarks.results import collect, load

    steps = np.arange(1, 1001) * 1000
    returns = np.concatenate([[np.nan] * 10, np.linspace(-21, 21, 990)])
    run = load.Run("d", "PongNoFrameskip-v4", "ppo", 1, steps, steps / 1000.0, returns, None, 4)
    spread = collect.curve_rows(run, [])
    assert len(spread) == collect.CURVE_POINTS and spread[0] == 0 and spread[-1] == 999
    first = next(i for i in range(500, 1000) if i not in spread)
    score = float(returns[first])  # first reached at a row the spread leaves out
    rows = collect.curve_rows(run, [score, 30.0])  # 30: never reached
    assert list(rows) == sorted([*spread, first])
    kept = load.Run("d", "PongNoFrameskip-v4", "ppo", 1, steps[rows], steps[rows] / 1000.0, returns[rows], None, 4)
    assert kept.steps[load.first_reached(kept, score)] == steps[first]


def test_a_return_just_below_a_score_is_not_rounded_onto_it():
    from benchmarks.results import collect, load

    # a RepeatFirstMedium run's rows: 0.89952 rounds to 0.9 at three digits, and was once taken for the first 0.9
    assert collect.rounded_return(0.8995175, [0.9]) == 0.899
    assert collect.rounded_return(0.9063127, [0.9]) == 0.906
    assert collect.rounded_return(0.8995175, []) == 0.9  # no score in the way: plain rounding
    assert collect.rounded_return(float("nan"), [0.9]) is None
    steps = np.array([1, 2, 3]) * 1000
    returns = np.array([0.5, 0.8995175, 0.9063127])
    run = load.Run("d", "popgym-RepeatFirstMedium-v0", "impala", 1, steps, steps / 1000.0, returns, None, 1)
    kept = np.array([collect.rounded_return(v, [0.9]) for v in returns])
    again = load.Run("d", run.env, "impala", 1, steps, steps / 1000.0, kept, None, 1)
    assert again.steps[load.first_reached(again, 0.9)] == run.steps[load.first_reached(run, 0.9)] == 3000


def pong_summary(agent: str, seed: int, returns: list[float], exact: list[float]) -> dict:
    """A hand-written summary of an Atari run: a row every 1M agent steps."""
    steps = [1_000_000 * (i + 1) for i in range(len(returns))]
    return {
        "package": "torchbeast_atari",
        "env": "PongNoFrameskip-v4",
        "agent": agent,
        "seed": seed,
        "label": None,
        "command": f"python -m torchbeast_atari.polybeast --env PongNoFrameskip-v4 --agent {agent} --seed {seed}",
        "machine": "H200, 16 cores",
        "agent_steps": steps[-1],
        "frames_per_step": 4,
        "validation": None,
        "final_test": {"mean": 19.0 + seed, "std": 0.0, "runs": [19.0 + seed]},
        "curve": {"exact_scores": exact, "step": steps, "time": [s / 1000 for s in steps], "return_last_100": returns},
    }


def region_rows(page: str, first: str = "| env | agent |") -> list[dict]:
    """The rows of every table between the markers (the whole text without them) whose header starts with ``first``
    (the packages' tables)."""
    region = page.split("<!-- suite:begin -->")[-1].split("<!-- suite:end -->")[0]
    return [row for block in region.split("\n\n") if block.startswith(first) for row in markdown_rows(block)]


@pytest.mark.multiprocess
def test_render_writes_the_region_and_curves_from_summaries_alone(suite, tmp_path):
    savedir, _ = suite
    data = tmp_path / "docs" / "data"
    status, out = collect([rundir(savedir, 1), rundir(savedir, 2)], data, "--machine", "2-core VM")
    assert status == 0, out
    pong = data / "torchbeast_atari" / "PongNoFrameskip-v4"
    pong.mkdir(parents=True)
    (pong / "ppo_seed1.json").write_text(json.dumps(pong_summary("ppo", 1, [-20.0, 5.0, 18.5, 19.0, 20.0], [18.0])))
    (pong / "ppo_seed2.json").write_text(json.dumps(pong_summary("ppo", 2, [-21.0, 1.0, 12.0, 18.0, 19.0], [18.0])))
    page = tmp_path / "docs" / "results.md"
    page.write_text(
        "# Results\n\nProse before.\n\n<!-- suite:begin -->\nold table\n<!-- suite:end -->\n\nProse after.\n"
    )
    result = run(
        SUITE,
        "render",
        "--data",
        str(data),
        "--out",
        str(page),
        "--img",
        str(tmp_path / "docs" / "img"),
        output=str(tmp_path / "out"),
        timeout=120,
    )
    assert result.returncode == 0, result.stdout
    text = page.read_text()
    assert text.startswith("# Results\n\nProse before.\n\n<!-- suite:begin -->\n") and "old table" not in text
    assert text.endswith("<!-- suite:end -->\n\nProse after.\n")
    rows = region_rows(text)
    cart = [json.loads((data / f"torchbeast_gym/CartPole-v1/impala_seed{s}.json").read_text()) for s in (1, 2)]
    ends = [c["curve"]["return_last_100"][-1] for c in cart]
    finals = [c["final_test"]["mean"] for c in cart]
    walls = [f"{c['wall_seconds'] / 60:.1f} min" for c in cart]
    assert rows == [
        {
            "env": "PongNoFrameskip-v4",
            "agent": "[ppo][ppo.md]",
            "seeds": "1 / 2",
            "agent steps": "5M",
            "last-100 at the end": "19.5 ± 0.5",
            "final test": "20.5 ± 0.5",
            "steps to anchor score": "18: 3M / 4M",
            "wall time": "83 min",
            "agent steps/s": "1,000",
            "machine": "H200",
            "variant runs": "-",
        },
        {
            "env": "CartPole-v1",
            "agent": "[impala][impala.md]",
            "seeds": "1 / 2",
            "agent steps": "8k",
            "last-100 at the end": f"{np.mean(ends):.1f} ± {np.std(ends):.1f}",
            "final test": f"{np.mean(finals):.1f} ± {np.std(finals):.1f}",
            "steps to anchor score": "-",
            "wall time": walls[0] if walls[0] == walls[1] else " / ".join(walls),
            "agent steps/s": f"{np.mean([8000 / c['curve']['time'][-1] for c in cart]):,.0f}",
            "machine": "2-core VM",
            "variant runs": "-",
        },
    ]
    # the rows link their pages of the experiments next to the page (reference links, defined once)
    assert "[ppo.md]: experiments/ppo.md\n" in text and "[impala.md]: experiments/impala.md\n" in text
    # the summary first: each row's score beside the best published point at or below its agent steps
    summary = region_rows(text, "| package |")
    assert summary[0] == {
        "package": "Atari",
        "env": "PongNoFrameskip-v4",
        "agent": "ppo",
        "seeds": "2",
        "agent steps": "5M",
        "ours": "20.5 ± 0.5 (final test)",
        "best published at ≤ our agent steps": "19.5 at 5M (CleanRL ppo_atari.py)",
    }
    assert text.index("## Summary") < text.index("## Results per package") < text.index("### Atari")
    assert "**MinAtar** (`torchbeast_minatar`): no run summaries yet (docs/data/torchbeast_minatar/)." in text
    # the commands under each table: the flags that differ from today's defaults, the run's identity dropped, each
    # seed's that differs in more than its --seed
    blocks = re.findall(r"```sh\n(.*?)\n```", text, re.S)
    assert blocks[0].splitlines() == [
        "# PongNoFrameskip-v4 ppo, seed 1 (seed 2 the same with its own --seed)",
        "python -m torchbeast_atari.polybeast --env PongNoFrameskip-v4 --agent ppo --seed 1",
    ]
    commit = cart[0]["git_commit"][:7]  # the commit a run was made at names its defaults
    assert blocks[1].startswith(
        f"# CartPole-v1 impala, seed 1 (seed 2 the same with its own --seed), at commit {commit}\n"
    )
    assert blocks[1].split("\n", 1)[1].replace(" \\\n    ", " ") == (
        "python -m torchbeast_gym.polybeast --env CartPole-v1 " + shlex.join(EXTRA) + f" --total_steps {STEPS} --seed 1"
    )
    assert all(len(line) <= 120 for line in blocks[1].splitlines())
    assert "### Atari (`torchbeast_atari`)" in text and "### gym (`torchbeast_gym`)" in text and "†" not in text
    for name in ("suite_torchbeast_atari_PongNoFrameskip-v4.png", "suite_torchbeast_gym_CartPole-v1.png"):
        png = tmp_path / "docs" / "img" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        assert f"](img/{name})" in text
    assert "[CleanRL ppo_atari.py](https://docs.cleanrl.dev/rl-algorithms/ppo/#ppo_ataripy) for ppo, impala" in text

    # a page without the markers is left as it is: the region goes to stdout
    (tmp_path / "plain.md").write_text("no markers\n")
    result = run(
        SUITE,
        "render",
        "--data",
        str(data),
        "--out",
        str(tmp_path / "plain.md"),
        "--img",
        str(tmp_path / "img2"),
        output=str(tmp_path / "out2"),
        timeout=120,
    )
    assert result.returncode == 0 and (tmp_path / "plain.md").read_text() == "no markers\n"
    assert "| 1 / 2 | 5M | 19.5 ± 0.5 |" in result.stdout
    assert "has no <!-- suite:begin --> ... <!-- suite:end --> region" in result.stdout


def test_the_plot_draws_the_anchors_points_and_a_score_not_kept_exactly_is_an_upper_bound(tmp_path):
    from benchmarks.results import groups, load, render_figure, render_rows

    anchors = load.load_anchors()
    summaries = [
        (str(tmp_path / f"{agent}.json"), pong_summary(agent, 1, [-20.0, 5.0, 18.5], exact))
        for agent, exact in (("ppo", [18.0]), ("r2d2", []))
    ]
    runs = [load.run_of_summary(path, s) for path, s in summaries]
    info = dict(summaries)
    fig = render_figure.plot_env("PongNoFrameskip-v4", [[run] for run in runs], info, anchors)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [
        "ppo (1 seed): last-100 18.5",
        "r2d2 (1 seed): last-100 18.5",
        "CleanRL dqn_atari.py (r2d2)",
        "CleanRL ppo_atari.py (ppo, impala)",
        "score 18",
    ]
    # the x-axis goes to our budget (the runs' most agent steps, 3M), the anchors' points up to it
    lines = {line.get_label(): line for line in ax.get_lines()}
    ppo = lines["CleanRL ppo_atari.py (ppo, impala)"]
    assert list(ppo.get_xdata()) == [1e6, 2e6, 3e6] and ppo.get_marker() == "s"
    assert list(ppo.get_ydata()) == [-9, 13, 17]
    assert list(lines["CleanRL dqn_atari.py (r2d2)"].get_ydata()) == [-14, 0, 17.7]
    assert ax.get_xlim()[1] == pytest.approx(3e6 * 1.03)
    groups.pyplot().close(fig)
    assert render_rows.reached_cell([runs[0]], info, 18.0) == "18: 3,000,000"
    assert render_rows.reached_cell([runs[1]], info, 18.0) == "18: ≤ 3,000,000"
    assert render_rows.reached_cell([runs[1]], info, 19.0) == "19: not on the kept rows"
    # 19 was not kept exactly either
    assert render_rows.reached_cell([runs[0]], info, 19.0) == "19: not on the kept rows"


def transcribed_summary(seed: int, points: list[tuple[int, float]], wall_seconds, final) -> dict:
    """A summary transcribed from a log: its recorded points alone, a time only where recorded."""
    summary = pong_summary("impala", seed, [v for _, v in points], [18.0])
    summary["curve"].update(rows=None, step=[s for s, _ in points], time=[None] * len(points))
    summary.update(
        agent_steps=points[-1][0],
        total_steps=5_000_000,
        machine="dev",
        final_test=final,
        wall_seconds=wall_seconds,
        steps_per_s=None if wall_seconds is None else 5e6 / wall_seconds,
        source="transcribed from docs/experiments/impala.md (a section); run directory not kept",
    )
    return summary


def test_a_transcribed_summary_is_marked_and_drawn_from_its_recorded_points(tmp_path):
    from benchmarks.results import groups, load, render, render_figure, render_rows

    anchors = load.load_anchors()
    one = [(1_000_000, -19.96), (2_000_000, -14.64), (3_746_240, 18.0), (5_000_000, 20.15)]
    two = [(1_000_000, -19.87), (3_595_520, 18.0), (4_000_000, 18.93), (5_000_000, 19.57)]
    summaries = [
        (str(tmp_path / "impala_seed1.json"), transcribed_summary(1, one, None, None)),
        (
            str(tmp_path / "impala_seed2.json"),
            transcribed_summary(2, two, 4176.0, {"mean": 19.39, "std": 0.18, "runs": [19.39]}),
        ),
    ]
    runs = [load.run_of_summary(path, s) for path, s in summaries]
    info = dict(summaries)
    assert [r.transcribed for r in runs] == [True, True] and math.isnan(runs[0].wall_seconds)
    row = dict(zip(render_rows.RENDER_HEADER, render_rows.render_row(runs, info, anchors, "impala")))
    assert row.pop("agent") == "impala"
    assert row == {
        "env": "PongNoFrameskip-v4",
        "seeds": "1† / 2†",
        "agent steps": "5,000,000",
        "last-100 at the end": "19.9 ± 0.3",
        "final test": "19.4 (1 of 2 seeds)",
        "steps to anchor score": "18: 3,746,240 / 3,595,520",
        "wall time": "- / 70 min",
        "agent steps/s": "- / 1,197",
        "machine": "dev",
    }
    fig = render_figure.plot_env("PongNoFrameskip-v4", [runs], info, anchors)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    for seed, points, marker, style, end in ((1, one, "o", "-", "20.1"), (2, two, "s", "--", "19.6")):
        line = lines[f"impala seed {seed}† (recorded points): last-100 {end}"]
        assert list(line.get_xdata()) == [s for s, _ in points] and list(line.get_ydata()) == [v for _, v in points]
        assert line.get_marker() == marker and line.get_linestyle() == style and line.get_drawstyle() == "default"
    assert len({lines[k].get_color() for k in lines if k.startswith("impala seed")}) == 1
    groups.pyplot().close(fig)
    # the table says what the mark means, once, under the table
    refs = set()
    page = render.page_runs(summaries)
    docs = os.path.join(REPO, "docs")
    section = render.render_package(
        "torchbeast_atari", page, info, anchors, docs, str(tmp_path), render_rows.EXPERIMENTS, refs
    )
    assert section.count("† Transcribed from the run's record in docs/experiments/") == 1
    assert "| [impala][impala.md] | 1† / 2† | 5M |" in section
    assert render_rows.page_refs(refs, docs) == ["[impala.md]: experiments/impala.md"]
    assert all(len(line.encode()) <= 200 for line in section.splitlines() if not line.startswith("!["))


def test_the_committed_summaries_load_and_say_where_a_transcribed_one_comes_from():
    from benchmarks.results import load

    for path, summary in load.load_summaries(os.path.join(REPO, "docs", "data")):
        run = load.run_of_summary(path, summary)
        assert np.all(np.diff(run.steps) > 0) and run.last_step == summary["agent_steps"], path
        if load.transcribed(summary):
            assert re.fullmatch(
                r"transcribed from docs/experiments/\w+\.md \(.+\); run directory not kept", summary["source"]
            ), path
            assert set(summary["curve"]["exact_scores"]) <= set(run.returns), path


def test_an_unfinished_run_says_how_far_it_got_and_a_missing_final_test_is_a_dash(tmp_path):
    from benchmarks import summary_table
    from benchmarks.results import load, render_rows

    stopped = pong_summary("r2d2", 1, [-21.0, -20.5], [18.0])
    stopped.update(total_steps=5_000_000, final_test=None, start="2026-11-29T04:01:27", end="2026-11-29T05:00:00")
    stopped["curve"]["step"] = [600_000, 1_234_560]
    running = dict(stopped, seed=2, end=None)
    finished = dict(pong_summary("r2d2", 3, [-21.0, -19.0], [18.0]), total_steps=2_000_000, final_test=None)
    summaries = [(str(tmp_path / f"r2d2_seed{s['seed']}.json"), s) for s in (stopped, running, finished)]
    runs = [load.run_of_summary(path, s) for path, s in summaries]
    info = dict(summaries)
    row = dict(zip(render_rows.RENDER_HEADER, render_rows.render_row(runs, info, load.load_anchors(), "agent")))
    assert row["agent steps"] == "1.23M of 5M, stopped / 1.23M of 5M, running when collected / 2,000,000"
    assert row["final test"] == "-" and row["last-100 at the end"] == "-20.0 ± 0.7"
    assert row["steps to anchor score"] == "18: not reached / not reached / not reached"
    row = dict(zip(render_rows.RENDER_HEADER, render_rows.render_row(runs[:1], info, load.load_anchors(), "agent")))
    assert row["agent steps"] == "1.23M of 5M, stopped" and row["final test"] == "-"
    # the summary says it per seed too: a seed that reached its own smaller budget is not "stopped"
    assert summary_table.steps_cell([runs[0], runs[2]], info) == "1.23M of 5M, stopped / 2M"
    assert summary_table.steps_cell(runs[2:], info) == "2M"
    steps = (5_000_000, 1_234_560, 844_800, 999)
    assert [summary_table.short_steps(n) for n in steps] == ["5M", "1.23M", "844.8k", "999"]


def test_a_final_test_on_held_out_levels_also_gives_the_training_levels(tmp_path):
    """Procgen's final test plays the training levels (group "train") beside held-out ones (group "test"): the
    summary keeps both, the cell gives the held-out levels' figure first."""
    from benchmarks.results import load, render_rows

    runs = [
        dict(name=name, group=group, episodes=2, mean_return=mean)
        for name, group, mean in (("train", "train", 11.0), ("a", "test", 9.0), ("b", "test", 10.0))
    ]
    groups = {"train": {"mean": 11.0, "std": 0.0}, "test": {"mean": 9.5, "std": 0.5}}
    for seed, result in ((1, dict(runs=runs, groups=groups, greedy=True, step=800)), (2, None)):
        (tmp_path / f"run{seed}").mkdir()
        if result:
            (tmp_path / f"run{seed}" / "final_test.json").write_text(json.dumps(result))
    summary = load.final_test_summary(str(tmp_path / "run1"))
    assert summary == dict(mean=9.5, std=0.5, runs=[9.0, 10.0], episodes=4, greedy=True, step=800, train=11.0)
    first = pong_summary("impala", 1, [5.0, 12.0], [])
    first["final_test"] = summary
    second = dict(pong_summary("impala", 2, [5.0, 14.0], []), final_test=dict(summary, mean=10.5, train=13.0))
    plain = pong_summary("impala", 3, [5.0, 14.0], [])
    summaries = [(str(tmp_path / f"impala_seed{s['seed']}.json"), s) for s in (first, second, plain)]
    runs = [load.run_of_summary(path, s) for path, s in summaries]
    cell = dict(
        zip(render_rows.RENDER_HEADER, render_rows.render_row(runs[:2], dict(summaries), load.load_anchors(), "agent"))
    )["final test"]
    assert cell == "10.0 ± 0.5 (training levels 12.0 ± 1.0)"
    cell = dict(
        zip(render_rows.RENDER_HEADER, render_rows.render_row(runs[2:], dict(summaries), load.load_anchors(), "agent"))
    )["final test"]
    assert cell == "22.0"


def test_an_agent_read_by_its_greedy_validations_gets_their_first_step_at_the_score(tmp_path):
    """R2D2's training returns include each env's exploration: where every seed has validations, the cell adds the
    step of the first validation at the score and the last validation's return."""
    from benchmarks.results import load, render_rows

    one = pong_summary("r2d2", 1, [-20.0, -5.0], [18.0])
    one["validation"] = {"source": "out.log", "step": [250_000, 500_000, 750_000], "mean_return": [-21.0, 18.5, 20.0]}
    two = pong_summary("r2d2", 2, [-21.0, -19.0], [18.0])
    two["validation"] = {"source": "out.log", "step": [250_000, 500_000], "mean_return": [-21.0, -17.25]}
    summaries = [(str(tmp_path / f"r2d2_seed{s['seed']}.json"), s) for s in (one, two)]
    runs = [load.run_of_summary(path, s) for path, s in summaries]
    row = dict(
        zip(render_rows.RENDER_HEADER, render_rows.render_row(runs, dict(summaries), load.load_anchors(), "agent"))
    )
    assert row["steps to anchor score"] == (
        "18: not reached / not reached; greedy validation: 500,000 (last 20 at "
        "750k) / not reached (last -17.25 at 500k)"
    )
    row = dict(
        zip(
            render_rows.RENDER_HEADER,
            render_rows.render_row(
                runs,
                dict(summaries, **{summaries[1][0]: pong_summary("r2d2", 2, [-21.0, -19.0], [18.0])}),
                load.load_anchors(),
                "r2d2",
            ),
        )
    )
    assert row["steps to anchor score"] == "18: not reached / not reached"  # a seed without validations: none shown


def test_anchors_name_their_sources_and_increase_in_steps():
    from benchmarks.results import load

    anchors = load.load_anchors()
    pairs = {(a["env"], agent): a for a in anchors["anchors"] for agent in a["agents"]}
    assert pairs[("BreakoutNoFrameskip-v4", "r2d2")]["points"][-1] == [10_000_000, 366.9]
    assert pairs[("BreakoutNoFrameskip-v4", "impala")]["score"] == 100
    assert pairs[("PongNoFrameskip-v4", "ppo")]["score"] == 18
    for anchor in anchors["anchors"]:
        source = anchors["sources"][anchor["source"]]
        assert source["name"] and source["url"].startswith("https://")
        steps = [step for step, _ in anchor["points"]]
        assert steps == sorted(set(steps))


def test_a_row_links_its_packages_page_then_recurrent_md_for_a_core_then_its_agents():
    from benchmarks.results import render_rows

    def page(package, agent, command):
        return os.path.basename(render_rows.experiments_page(package, agent, {"command": command}))

    pong = "python -m torchbeast_atari.polybeast --env PongNoFrameskip-v4 --seed 1"
    assert page("torchbeast_atari", "impala", pong) == "impala.md"
    assert page("torchbeast_atari", "impala", pong + " --use_rtrl") == "recurrent.md"
    assert page("torchbeast_atari", "ppo", pong + " --use_lstm=True") == "recurrent.md"
    assert page("torchbeast_atari", "r2d2", pong) == "r2d2.md"  # its LSTM is the agent's default, not a flag
    assert page("torchbeast_memory", "impala", "python -m torchbeast_memory.polybeast --use_rtrl") == "memory.md"
    assert page("torchbeast_atari", "impala+rnd", pong) == "impala.md"


def copy_of_docs(tmp_path):
    """docs/results.md and docs/experiments/ copied under ``tmp_path``/docs: a render there leaves the repo's as
    they are."""
    docs = tmp_path / "docs"
    shutil.copytree(os.path.join(REPO, "docs", "experiments"), docs / "experiments")
    shutil.copy(os.path.join(REPO, "docs", "results.md"), docs / "results.md")
    return docs


@pytest.mark.multiprocess
def test_the_committed_summaries_render_a_page_a_researcher_reads_in_minutes(tmp_path):
    """docs/data rendered into a copy of the page: under 400 lines, none over 200 characters, the summary first, and
    no command carries the machine it ran on (a path of it, its run directory's --savedir or its sockets)."""
    docs = copy_of_docs(tmp_path)
    result = run(
        SUITE,
        "render",
        "--out",
        str(docs / "results.md"),
        "--img",
        str(docs / "img"),
        output=str(tmp_path / "out"),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    text = (docs / "results.md").read_text()
    lines = text.splitlines()
    assert len(lines) < 400, len(lines)
    assert [line for line in lines if len(line) > 200] == []
    assert text.index("## Summary") < text.index("## Results per package")
    region = text.split("<!-- suite:begin -->")[1].split("<!-- suite:end -->")[0]
    commands = "\n".join(re.findall(r"```sh\n(.*?)\n```", region, re.S))
    loops = re.findall(r"^for env in (.*); do$", commands, re.M)  # one command per env it names
    named = sum(len(envs.split()) for envs in loops) + len(re.findall(r"^python -m torchbeast_", commands, re.M))
    assert named >= len(region_rows(text)) > 0
    for word in ("/work/", "/tmp/", "--savedir", "--pipes_basename", "--xpid"):
        assert word not in commands, word
    # every image and reference link the region names is there
    for png in re.findall(r"\]\((img/[^)]+\.png)\)", region):
        assert (docs / png).stat().st_size > 10_000, png
    for label in set(re.findall(r"\]\[([^\]]+)\]", region)):
        assert f"\n[{label}]: experiments/" in region, label
    # the variants' tables went into the pages the rows link, their commands without the machine's paths either
    for page in ("impala.md", "memory.md", "recurrent.md"):
        variants = (docs / "experiments" / page).read_text().split("<!-- suite:variants:begin -->")[1]
        assert "| what differs |" in variants and "/work/" not in variants and "--savedir" not in variants, page


def summary_of(package: str, env: str, agent: str, seed: int, returns: list[float], final, command: str = "") -> dict:
    """A hand-written summary: a row every 1M agent steps, a final test's mean (None: none)."""
    steps = [1_000_000 * (i + 1) for i in range(len(returns))]
    return {
        "package": package,
        "env": env,
        "agent": agent,
        "seed": seed,
        "label": None,
        "command": f"python -m {package}.polybeast --env {env} --agent {agent} --seed {seed} {command}".strip(),
        "machine": "Xeon, alone",
        "total_steps": steps[-1],
        "agent_steps": steps[-1],
        "frames_per_step": 1,
        "validation": None,
        "final_test": None if final is None else {"mean": final, "std": 0.0, "runs": [final]},
        "curve": {"exact_scores": [], "step": steps, "time": [s / 1000 for s in steps], "return_last_100": returns},
    }


MINATAR_ANCHORS = {
    "sources": {"paper": {"name": "MinAtar paper", "url": "https://example.org"}},
    "anchors": [
        {"env": "MinAtar/Breakout-v0", "agents": ["impala"], "source": "paper", "score": 17.5, "random": 0.5,
         "points": [[1_000_000, 10.0], [3_000_000, 16.5], [5_000_000, 17.5]]},
        {"env": "MinAtar/Breakout-v0", "agents": ["impala"], "source": "paper", "score": None,
         "points": [[10_000_000, 28.0]]},
        {"env": "MinAtar/Freeway-v0", "agents": ["impala", "r2d2"], "source": "paper", "score": 47.5,
         "random": 0.0, "points": [[2_000_000, 40.0], [5_000_000, 47.5]]},
    ],
}  # fmt: skip


def test_minatar_is_summarised_by_each_agents_iqm_with_a_stratified_bootstrap_interval(tmp_path):
    """Synthetic MinAtar summaries (envs named MinAtar/<Game>-v0, their files under MinAtar-<Game>-v0/): each run's
    score (its final test, else its last-100) normalised per game between the random return and the best anchor
    point at or below its agent steps; the IQM over games x seeds is rliable's, its interval reproducible."""
    from scipy import stats

    from benchmarks import summary_table
    from benchmarks.results import collect, load, render

    scores = {  # (game, seed): (last-100, final test)
        ("Breakout", 1): (15.0, 16.0),
        ("Breakout", 2): (12.0, None),
        ("Breakout", 3): (9.0, 8.5),
        ("Freeway", 1): (30.0, 31.0),
        ("Freeway", 2): (45.0, 47.5),
        ("Freeway", 3): (20.0, None),
    }
    data = tmp_path / "data"
    for (game, seed), (last, final) in scores.items():
        summary = summary_of(
            "torchbeast_minatar", f"MinAtar/{game}-v0", "impala", seed, [1.0, 5.0, 9.0, 12.0, last], final
        )
        path = collect.summary_path(str(data), summary)
        assert path == str(data / "torchbeast_minatar" / f"MinAtar-{game}-v0" / f"impala_seed{seed}.json")
        collect.write_summary(path, summary)
    summaries = load.load_summaries(str(data))
    (tmp_path / "img").mkdir()
    region, _ = render.render_markdown(summaries, MINATAR_ANCHORS, str(tmp_path), str(tmp_path / "img"), str(data))
    # normalised by hand: Breakout between 0.5 and 17.5 (the 5M point; the 10M one lies beyond), Freeway 0 and 47.5
    expected = np.array(
        [[(16.0 - 0.5) / 17.0, 31.0 / 47.5], [(12.0 - 0.5) / 17.0, 1.0], [(8.5 - 0.5) / 17.0, 20.0 / 47.5]]
    )
    iqm = stats.trim_mean(expected, 0.25, axis=None)
    point, low, high = summary_table.interval_estimate(expected)
    assert point == pytest.approx(iqm) and low <= point <= high
    assert summary_table.interval_estimate(expected) == (point, low, high)  # the bootstrap's seed is fixed
    assert region_rows(region, "| agent | games |") == [
        {
            "agent": "impala",
            "games": "2",
            "seeds (every game's)": "3 (1, 2, 3)",
            "IQM, normalised": f"{iqm:.2f}",
            "95% CI": f"[{low:.2f}, {high:.2f}]",
            "score used": "final test (4 runs), last-100 (2 runs)",
        }
    ]
    assert "stratified-bootstrap confidence interval (rliable, 2,000 resamples, seed 0)" in " ".join(region.split())
    # per game, ours over the seeds beside the game's best published point at or below the runs' budget
    assert region_rows(region, "| agent | Breakout-v0 |") == [
        {"agent": "best published", "Breakout-v0": "17.5 at 5M (MinAtar paper); random 0.5",
         "Freeway-v0": "47.5 at 5M (MinAtar paper); random 0"},
        {"agent": "impala", "Breakout-v0": f"{np.mean([16.0, 12.0, 8.5]):.1f} ± {np.std([16.0, 12.0, 8.5]):.1f} "
         "(seed 1 final test, seed 2 last-100, seed 3 final test)",
         "Freeway-v0": f"{np.mean([31.0, 47.5, 20.0]):.1f} ± {np.std([31.0, 47.5, 20.0]):.1f} "
         "(seed 1 final test, seed 2 final test, seed 3 last-100)"},
    ]  # fmt: skip
    for game in ("Breakout", "Freeway"):
        assert (tmp_path / "img" / f"suite_torchbeast_minatar_MinAtar-{game}-v0.png").stat().st_size > 10_000
    # a seed on one game only stays out of the matrix (the seeds every game has); a run with no published point at
    # or below its agent steps is named
    groups = [
        [load.run_of_summary(p, s) for p, s in summaries if s["env"] == env]
        for env in ("MinAtar/Breakout-v0", "MinAtar/Freeway-v0")
    ]
    extra = summary_of("torchbeast_minatar", "MinAtar/Breakout-v0", "impala", 4, [1.0, 14.0], None)
    groups[0].append(load.run_of_summary("extra", extra))  # at 2M: normalised by the 1M point
    rows, left_out = summary_table.iqm_rows(groups, MINATAR_ANCHORS)
    assert [row[2] for row in rows] == ["3 (1, 2, 3)"] and left_out == []
    early = summary_of("torchbeast_minatar", "MinAtar/Freeway-v0", "r2d2", 1, [3.0], None)
    rows, left_out = summary_table.iqm_rows([[load.run_of_summary("early", early)]], MINATAR_ANCHORS)
    assert rows == [] and left_out == ["MinAtar/Freeway-v0 r2d2"]


def test_a_variant_is_marked_in_its_summary_and_a_rows_command_keeps_what_differs_from_todays_defaults(tmp_path):
    """A summary's ``variant`` (or a command needing a path of the machine) sends its row to docs/experiments/; a
    package-default row is named by the core its command parses to and shows only the flags that differ from the
    package's defaults of today, --env and --seed always; two default rows of one seed are refused."""
    from benchmarks import page_rows
    from benchmarks.results import render, render_rows
    from rl_core.errors import UserError

    identity = "--xpid pong_s1 --savedir /work/runs/s1 --pipes_basename unix:/tmp/suite-1-0"
    today = summary_of(
        "torchbeast_atari", "PongNoFrameskip-v4", "impala", 1, [-20.0, 19.0], 19.5,
        f"{identity} --total_steps 5000000 --entropy_cost 0.01 --entropy_decay linear --use_rtrl --stem_value",
    )  # fmt: skip
    assert page_rows.page_command(today) == (
        "python -m torchbeast_atari.polybeast --env PongNoFrameskip-v4 --use_rtrl --total_steps 5000000 --seed 1"
    )
    assert page_rows.core_of(today) == "rtrl_elstm" and page_rows.variant_reason(today) is None
    older = dict(today, seed=2, command=today["command"].replace("--entropy_cost 0.01", "--entropy_cost 0.0006"))
    assert "--entropy_cost 0.0006" in page_rows.page_command(older)  # a value no longer the default stays
    probe = dict(today, seed=3, command=today["command"] + " --load_conv_net_from /work/runs/ppo/model.tar")
    assert page_rows.variant_reason(probe) == "its command needs a file of the machine it ran on"
    assert "--load_conv_net_from SAVEDIR/ppo/model.tar" in page_rows.variant_command(probe)
    marked = dict(today, seed=4, label="nostem", variant="no stem (--mlp_sizes=)")
    plain = summary_of("torchbeast_atari", "PongNoFrameskip-v4", "impala", 1, [-20.0, 18.0], None)
    summaries = [(str(tmp_path / f"{i}.json"), s) for i, s in enumerate((today, older, probe, marked, plain))]
    page = render.page_runs(summaries)
    assert {key: [r.seed for r in g] for key, g in page.defaults.items()} == {
        ("torchbeast_atari", "PongNoFrameskip-v4", "impala [feedforward]"): [1],
        ("torchbeast_atari", "PongNoFrameskip-v4", "impala [rtrl_elstm]"): [1, 2],
    }
    assert sorted(page.reasons.values()) == [
        "its command needs a file of the machine it ran on",
        "no stem (--mlp_sizes=)",
    ]
    cell = render.variant_pages(page.defaults[("torchbeast_atari", "PongNoFrameskip-v4", "impala [rtrl_elstm]")], page,
                               dict(summaries), render_rows.EXPERIMENTS)  # fmt: skip
    assert cell == {os.path.join(render_rows.EXPERIMENTS, "recurrent.md"): 2}
    twice = dict(today, label="again")
    with pytest.raises(UserError, match="are both the package-default row impala \\[rtrl_elstm\\]"):
        render.page_runs(summaries + [(str(tmp_path / "again.json"), twice)])


@pytest.mark.multiprocess
def test_collect_marks_a_variant_and_render_moves_it_into_the_experiments_page(suite, tmp_path):
    savedir, _ = suite
    data = tmp_path / "docs" / "data"
    status, out = collect([rundir(savedir, 1)], data, "--variant", "a probe")
    assert status == 0, out
    assert json.loads((data / "torchbeast_gym/CartPole-v1/impala_seed1.json").read_text())["variant"] == "a probe"
    status, out = collect([rundir(savedir, 2)], data)
    assert status == 0, out
    docs = tmp_path / "docs"
    (docs / "experiments").mkdir()
    (docs / "experiments" / "impala.md").write_text("# IMPALA\n\nProse.\n")
    (docs / "results.md").write_text("# Results\n\n<!-- suite:begin -->\n<!-- suite:end -->\n")
    result = run(
        SUITE, "render", "--data", str(data), "--out", str(docs / "results.md"), "--img", str(docs / "img"),
        output=str(tmp_path / "out"), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    assert [r["seeds"] for r in region_rows((docs / "results.md").read_text())] == ["2"]
    impala = (docs / "experiments" / "impala.md").read_text()
    assert impala.startswith("# IMPALA\n\nProse.\n\n## Variant runs\n\n<!-- suite:variants:begin -->\n")
    variants = region_rows(impala.replace("suite:variants:", "suite:"))
    assert [(r["seeds"], r["what differs"]) for r in variants] == [("1", "a probe")]
    assert "[1][impala.md variants]" in (docs / "results.md").read_text()


def test_a_source_whose_anchors_name_different_agents_is_listed_once_with_all_of_them():
    from types import SimpleNamespace

    from benchmarks.results import render

    anchors = {
        "sources": {"paper": {"name": "A paper", "url": "https://example.org/paper"}},
        "anchors": [
            {"env": "A-v0", "agents": ["impala", "ppo"], "source": "paper"},
            {"env": "B-v0", "agents": ["r2d2", "ppo"], "source": "paper"},
        ],
    }
    runs = [SimpleNamespace(env="A-v0", agent="impala"), SimpleNamespace(env="B-v0", agent="r2d2")]
    line = render.anchors_line(runs, anchors)
    assert line == "Anchors: [A paper](https://example.org/paper) for impala, ppo, r2d2."


def test_commands_that_differ_in_their_env_alone_are_one_loop_that_runs_each(tmp_path):
    """The same agent, seeds and flags on several envs: one ``for env in`` loop whose comment names each env's commit;
    run in bash it gives each env's own command.  A command with other flags stays on its own."""
    from benchmarks.results import load, render_rows

    def run_of(env: str, seed: int, commit: str, extra: str = ""):
        summary = summary_of("torchbeast_minatar", env, "vpg", seed, [1.0], None, extra)
        summary["git_commit"] = commit * 40
        return load.run_of_summary(f"{env}_{seed}_{extra}", summary), summary

    made = [
        [run_of("MinAtar/Breakout-v0", 1, "a"), run_of("MinAtar/Breakout-v0", 2, "b")],
        [run_of("MinAtar/Freeway-v0", 1, "a"), run_of("MinAtar/Freeway-v0", 2, "b")],
        [run_of("MinAtar/Asterix-v0", 1, "c"), run_of("MinAtar/Asterix-v0", 2, "c")],
        [run_of("MinAtar/SpaceInvaders-v0", 1, "a", "--entropy_cost 0.02")],
    ]
    groups = [[r for r, _ in group] for group in made]
    info = {r.run_dir: s for group in made for r, s in group}
    block = render_rows.command_block(groups, info)
    assert block == [
        "```sh",
        "# vpg, seed 1 (seed 2 the same with its own --seed), on each of 3 envs, at commits aaaaaaa / bbbbbbb "
        "(Breakout-v0,",
        "#   Freeway-v0), ccccccc (Asterix-v0)",
        "for env in MinAtar/Breakout-v0 MinAtar/Freeway-v0 MinAtar/Asterix-v0; do",
        '    python -m torchbeast_minatar.polybeast --env "$env" --agent vpg --seed 1; done',
        "# MinAtar/SpaceInvaders-v0 vpg, seed 1, at commit aaaaaaa",
        "python -m torchbeast_minatar.polybeast --env MinAtar/SpaceInvaders-v0 --agent vpg --entropy_cost 0.02 --seed 1",
        "```",
    ]
    script = 'python() { echo "python $*"; }\n' + "\n".join(block[1:-1])
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    assert ran == [
        f"python -m torchbeast_minatar.polybeast --env MinAtar/{game}-v0 --agent vpg --seed 1"
        for game in ("Breakout", "Freeway", "Asterix")
    ] + [
        "python -m torchbeast_minatar.polybeast --env MinAtar/SpaceInvaders-v0 --agent vpg --entropy_cost 0.02 --seed 1"
    ]
