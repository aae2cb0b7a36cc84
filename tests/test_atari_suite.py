"""benchmarks/atari_suite.py on real runs (CartPole through --package torchbeast_gym, two seeds of a few seconds):
``run`` starts the launcher with nothing but the run's identity and skips what finished, ``table`` summarises the
run directories as computed here from their files, and a bad directory is refused in one line."""

import json
import math
import re
import shutil

import numpy as np
import pytest

from tests.proc_utils import csv_rows, last_line, run

SUITE = "benchmarks.atari_suite"
STEPS = 8_000
EXTRA = ["--log_interval", "0.2", "--test_episodes", "5"]  # passed on after --: a row every 0.2 s, a short final test


def suite_run(savedir, output, *seeds: str):
    return run(SUITE, "run", "--package", "torchbeast_gym", "--games", "CartPole-v1", "--agents", "impala",
               "--seeds", *seeds, "--total_steps", str(STEPS), "--savedir", str(savedir), "--", *EXTRA,
               output=str(output), timeout=180)


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """The suite run once: (its savedir, its output)."""
    tmp = tmp_path_factory.mktemp("suite")
    result = suite_run(tmp / "runs", tmp / "out", "1", "2")
    assert result.returncode == 0, result.stdout[-3000:]
    return tmp / "runs", result.stdout


def rundir(savedir, seed):
    return savedir / f"CartPole-v1_impala_seed{seed}"


def test_run_passes_only_the_runs_identity_and_skips_finished_runs(suite, tmp_path):
    savedir, out = suite
    pipes = []
    for seed in (1, 2):
        argv = json.loads((rundir(savedir, seed) / "meta.json").read_text())["argv"][1:]
        pipes.append(argv[argv.index("--pipes_basename") + 1])
        assert argv == ["--env", "CartPole-v1", "--agent", "impala", "--seed", str(seed), "--xpid",
                        f"CartPole-v1_impala_seed{seed}", "--savedir", str(savedir), "--pipes_basename", pipes[-1],
                        "--total_steps", str(STEPS), *EXTRA]
        assert f"CartPole-v1 impala seed {seed}: started, 8,000 steps" in out
        assert f"CartPole-v1 impala seed {seed}: finished, exit status 0" in out
    assert all(re.fullmatch(r"unix:/tmp/atari_suite-\d+-\d", p) for p in pipes) and pipes[0] != pipes[1]

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
    assert "seed 2: resumed at logged step 8,000" in resumed.stdout and "without final_test.json" in resumed.stdout
    assert "1 run, 0 skipped, 0 failed" in resumed.stdout
    tested, original = (json.loads((rundir(d, 2) / "final_test.json").read_text()) for d in (copy, savedir))
    assert tested["groups"] == original["groups"] and tested["step"] == original["step"]  # greedy, same test seeds


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
        runs.append({"step": steps[-1], "sps": steps[-1] / times[-1], "end": returns[-1], "final": final,
                     "first": f"{steps[first]:,}" if first is not None else "not reached",
                     "minutes": f"{times[first] / 60:.2f}" if first is not None else "not reached",
                     "at": before[-1] if before else None})
    ends, finals = [r["end"] for r in runs], [r["final"] for r in runs]
    at = [r["at"] for r in runs if r["at"] is not None]
    steps = [f"{r['step']:,}" for r in runs]
    return {
        "game": "CartPole-v1", "agent": "impala", "seeds": "1 / 2",
        "agent steps": steps[0] if steps[0] == steps[1] else " / ".join(steps),
        "last-100 return": f"{np.mean(ends):.1f} ± {np.std(ends):.1f}",
        "last-100 per seed": " / ".join(f"{v:.1f}" for v in ends),
        "final test": f"{np.mean(finals):.1f} ± {np.std(finals):.1f}",
        f"step first ≥ {score:g}": " / ".join(r["first"] for r in runs),
        f"minutes to ≥ {score:g}": " / ".join(r["minutes"] for r in runs),
        "agent steps/s": f"{np.mean([r['sps'] for r in runs]):,.0f}",
        "frames/s": f"{np.mean([r['sps'] for r in runs]):,.0f}",  # CartPole: one frame per agent step
        f"last-100 at {step_at:,}": f"{np.mean(at):.1f} ± {np.std(at):.1f}"
                                    + ("" if len(at) == 2 else f" ({len(at)} of 2 seeds)"),
    }


def markdown_rows(text: str) -> list[dict]:
    lines = [line for line in text.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


def test_table_rows_match_the_run_directories(suite, tmp_path):
    savedir, _ = suite
    tops = [np.nanmax([float(r["return_last_100"]) for r in csv_rows(str(rundir(savedir, s) / "logs.csv"))])
            for s in (1, 2)]
    assert tops[0] != tops[1]
    score = round(sum(tops) / 2, 3)  # between the seeds' best: one seed reaches it, the other does not
    step_at = int(csv_rows(str(rundir(savedir, 1) / "logs.csv"))[1]["step"])  # seed 1's second row
    png = tmp_path / "curves.png"
    result = run(SUITE, "table", str(rundir(savedir, 1)), str(rundir(savedir, 2)), "--score", str(score),
                 "--png", str(png), "--steps_at", str(step_at), output=str(tmp_path / "out"), timeout=120)
    assert result.returncode == 0, result.stdout
    rows = markdown_rows(result.stdout)
    assert rows == [expected_row(savedir, score, step_at)]
    assert "not reached" in rows[0][f"step first ≥ {score:g}"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    assert matplotlib.image.imread(str(png)).shape[2] in (3, 4)


def test_bad_directories_and_flags_are_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for path, cause in [(tmp_path / "empty", "has no logs.csv"), (tmp_path / "nowhere", "is not a directory")]:
        result = run(SUITE, "table", str(path), output=str(tmp_path / "out"), timeout=60)
        assert result.returncode == 2
        assert result.stdout.strip().splitlines() == [last_line(result.stdout)]
        assert f"error: {path} {cause}" in result.stdout and "pass run directories (SAVEDIR/XPID)" in result.stdout
    # a flag the launcher refuses stops the suite before any run starts
    result = run(SUITE, "run", "--package", "torchbeast_gym", "--games", "CartPole-v1", "--savedir",
                 str(tmp_path / "runs"), "--", "--no_such_flag", "1", output=str(tmp_path / "out2"), timeout=60)
    assert result.returncode == 2 and len(result.stdout.strip().splitlines()) == 1
    assert "unrecognized arguments: --no_such_flag 1" in result.stdout and not (tmp_path / "runs").exists()


def test_a_resumed_runs_rows_keep_its_last_history_and_sum_its_wall_time():
    """A resume restarts logs.csv's clock and repeats the steps past its checkpoint (here rows of a run stopped at
    step 300, resumed from its checkpoint at 200): the table's steps increase and its seconds add up the starts."""
    from benchmarks import atari_suite

    times = [1.0, 2.0, 3.0, 0.5, 1.5]
    assert atari_suite.wall_seconds(times) == [1.0, 2.0, 3.0, 3.5, 4.5]
    rows = [(100, 1.0), (200, 2.0), (300, 3.0), (250, 3.5), (350, 4.5)]
    assert atari_suite.last_history(rows) == [(100, 1.0), (200, 2.0), (250, 3.5), (350, 4.5)]


def test_a_seed_run_twice_is_counted_as_runs_not_seeds():
    """The legend and the partial means say "runs of k seeds" where a seed was run more than once."""
    from benchmarks import atari_suite

    def runs(*seeds):
        empty = np.zeros(0)
        return [atari_suite.Run("d", "PongNoFrameskip-v4", "impala", s, empty, empty, empty, None, 4) for s in seeds]

    assert atari_suite.count_label(runs(1, 2)) == "2 seeds"
    assert atari_suite.count_label(runs(3)) == "1 seed"
    assert atari_suite.count_label(runs(1, 1)) == "2 runs of 1 seed"
    assert atari_suite.count_label(runs(1, 1, 2)) == "3 runs of 2 seeds"
    assert atari_suite.mean_std([1.0, 3.0], runs(1, 2)) == "2.0 ± 1.0"
    assert atari_suite.mean_std([1.0, 3.0], runs(1, 2, 3)) == "2.0 ± 1.0 (2 of 3 seeds)"
    assert atari_suite.mean_std([1.0, 3.0], runs(1, 1, 2)) == "2.0 ± 1.0 (2 of 3 runs)"
    assert atari_suite.mean_std([], runs(1)) == "-"
