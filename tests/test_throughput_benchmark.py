"""benchmarks/throughput.py's paired comparison of server layouts measured in one run."""

import pytest

import argparse

from benchmarks.throughput import layout, layout_flags, layout_summary


def test_each_layout_is_paired_with_the_first_layouts_run_of_the_same_repeat():
    # repeat 1 on a fast minute, repeat 2 on a slow one: the pairs cancel the drift
    speeds = {(56, "2"): [800.0, 600.0], (56, "1"): [840.0, 660.0], (16, "2"): [500.0], (16, "1"): [450.0]}
    lines = layout_summary(speeds, ["2", "1"])
    assert len(lines) == 2
    assert lines[0].startswith("56 envs, 1 servers against 2: steps/s x1.075 ")  # median of 1.05 and 1.10
    assert "1.050-1.100 over 2 repeats" in lines[0] and "750 against 700" in lines[0]
    assert lines[1].startswith("16 envs, 1 servers against 2: steps/s x0.900 ")


@pytest.mark.parametrize("servers", [["2"], []])
def test_one_layout_has_nothing_to_pair(servers):
    assert layout_summary({(56, "2"): [800.0]}, servers) == []


def test_a_layout_is_servers_or_servers_x_servers_per_process():
    assert layout_flags(layout("2")) == ["--num_servers=2"]
    assert layout_flags(layout("4x2")) == ["--num_servers=4", "--server_splits=2"]
    for bad in ("0", "3x2", "2x", "x2", "two"):
        with pytest.raises(argparse.ArgumentTypeError, match="give S or SxH"):
            layout(bad)


@pytest.mark.multiprocess
def test_the_data_path_benchmark_measures_old_and_the_acting_process_in_one_run(capsys):
    """benchmarks/data_path.py end to end on the null env, one short run per path: each path's row, and the
    acting process's core-us apart from the learner process's."""
    from benchmarks import data_path

    argv = ["--cases", "null", "--seconds", "16", "--repeats", "1", "--paths", "old", "--acting_processes", "2"]
    data_path.main([*argv, "--extra", "--num_servers=2"])
    out = capsys.readouterr().out
    rows = {line.split()[1]: line.split() for line in out.splitlines() if line.startswith("null ")}
    assert set(rows) == {"old", "proc2"}  # (proc2: the acting process split two ways, a server each)
    sps, learner_us, acting_us = (float(rows["proc2"][i].replace(",", "")) for i in (2, 3, 4))
    assert sps > 0 and learner_us > 0 and acting_us > 0  # the children's share is measured apart
    assert float(rows["old"][4]) == 0.0  # no acting process on the old path
    # the one-process ceiling: 1e6 over the busiest process's core-us per step, so at most the learner's figure's
    # and (two acting processes sharing acting_us, the busier holding at least half) 2e6 / acting_us
    ceiling = {path: float(row[7].replace(",", "")) for path, row in rows.items()}
    assert 0 < ceiling["old"] <= 1e6 / float(rows["old"][3].replace(",", "")) * 1.01
    assert 0 < ceiling["proc2"] <= min(1e6 / learner_us, 2e6 / acting_us) * 1.01
    assert "null      proc2 one-process ceiling" in out
    assert "null      proc2 steps/s" in out
