"""The launcher's sizing (rl_core/config/sizing.py): the package's defaults on 2 cores, explicit flags win, the
16-core GPU anchor, the constraints, and one launcher run that logs and records what it chose."""

import importlib
import itertools
import json
import math
import os

import pytest

from rl_core.config import sizing
from rl_core.agents import AGENTS
from rl_core.config.env_package import installed_env_packages
from rl_core.config.resolve import package_defaults, resolve
from rl_core.runtime import entry

PACKAGES = list(installed_env_packages())  # every registered package (pyproject.toml)
KEYS = ("num_servers", "num_actors", "batch_size", "unroll_length", "total_steps", "server_splits")


def package(name):
    return importlib.import_module(f"{name}.env")


def envs_per_server(name):
    """What the package asks of the sizing (its ENVS_PER_SERVER; None: none)."""
    return getattr(package(name), "ENVS_PER_SERVER", None)


def defaults_of(name, argv):
    """The package's defaults for the command line ``argv`` (its agent, core, --rnd)."""
    values = package_defaults(package(name), argv)
    return {k: values[k] for k in KEYS}


def launcher_values(name, argv):
    """What the launcher's parse gives the sized flags (the package's checks left out: DMLab's needs the
    library), on the cores $POLYBEAST_CORES says."""
    parsed = resolve(package(name), argv, entry.this_machine(), auto_size=True, checks=False)
    return {k: getattr(parsed.flags, k) for k in KEYS}, parsed.sizing


def command_lines():
    for agent in AGENTS:
        yield [f"--agent={agent}"]
        if agent not in ("sac", "r2d2"):
            yield [f"--agent={agent}", "--rnd"]
        if agent != "sac":
            yield [f"--agent={agent}", "--use_lstm"]


@pytest.mark.parametrize("name", PACKAGES)
def test_two_cores_give_the_package_defaults_for_every_agent(name, monkeypatch):
    monkeypatch.setenv(sizing.CORES_ENV, "2")
    for argv in command_lines():
        expected = defaults_of(name, argv)
        values, chosen = launcher_values(name, argv)
        assert values == expected, argv
        assert chosen.auto == ("num_servers", "num_actors", "batch_size")
        assert chosen.reason.startswith("the package's defaults (2 usable cores"), chosen.reason
        for gpu in (False, True):  # the pure function, with or without a GPU learner
            agent = argv[0].split("=")[1]
            for cores in (1, 2):
                got = sizing.size_run(cores, gpu, agent, envs_per_server(name), expected, {})
                assert got.values() == {k: expected[k] for k in sizing.SIZED_FLAGS}, (argv, cores, gpu)


def test_sixteen_cores_with_a_gpu_give_impala_on_atari_at_most_eight_batches_of_envs():
    """IMPALA's envs stay within MAX_LAG batches and its batch stays the package's 8: on the H200 machine this
    layout reached 18 on Pong in 8.3 minutes, where 448 envs in batches of 56 were at -17 after 6."""
    defaults = defaults_of("torchbeast_atari", [])
    got = sizing.size_run(16, True, "impala", envs_per_server("torchbeast_atari"), defaults, {})
    assert (got.num_servers, got.num_actors, got.batch_size) == (14, 56, 8)  # a server a core, 4 envs each
    assert (
        "16 usable cores, learner on cuda, --agent impala: 14 env servers x 4 envs = 56 (a core each, 2 left to "
        "the learner), at most 8 batches of 8 (an unroll waits at most ~8 learner steps)" in got.reason
    )
    assert got.reason.endswith("set --num_servers/--num_actors/--batch_size to override")
    # a bigger batch raises the envs: 448 envs in batches of 56 is the hand-found 57k frames/s layout of an H100
    big = sizing.size_run(16, True, "impala", envs_per_server("torchbeast_atari"), defaults, {"batch_size": 56})
    assert (big.num_servers, big.num_actors, big.batch_size) == (14, 448, 56)
    assert "at most 8 batches" not in big.reason  # 32 envs a server, the package's, fit within the lag
    # without a GPU the learner keeps half the cores and servers step half as many envs, within the same lag
    cpu = sizing.size_run(16, False, "impala", envs_per_server("torchbeast_atari"), defaults, {})
    assert (cpu.num_servers, cpu.num_actors, cpu.batch_size) == (8, 64, 8)
    # more servers than the lag's envs (8 batches of 1): fewer servers, never fewer envs than the defaults' 56
    wide = sizing.size_run(64, True, "impala", envs_per_server("torchbeast_atari"), defaults, {"batch_size": 1})
    assert (wide.num_servers, wide.num_actors, wide.batch_size) == (8, 56, 1)


def test_every_sized_impala_run_keeps_its_batch_and_at_most_eight_batches_of_envs():
    for name, games in [
        ("torchbeast_atari", 1),
        ("torchbeast_procgen", 1),
        ("torchbeast_procgen", 16),
        ("torchbeast_football", 1),
        ("torchbeast_mujoco", 1),
        ("torchbeast_dmlab", 1),
    ]:
        d = defaults_of(name, ["--agent=impala"])
        for cores, gpu in itertools.product(range(3, 70), (False, True)):
            got = sizing.size_run(cores, gpu, "impala", envs_per_server(name), d, {}, games)
            where = (name, games, cores, gpu)
            assert got.batch_size == d["batch_size"], where
            # (the defaults' envs, spread evenly, may round past the lag's: 56 on 13 servers is 65)
            step = math.lcm(got.num_servers, games)
            evenly = -(-d["num_actors"] // step) * step
            assert got.num_actors <= max(evenly, sizing.MAX_LAG * d["batch_size"]), where


def test_other_agents_on_a_big_machine():
    atari = {agent: defaults_of("torchbeast_atari", [f"--agent={agent}"]) for agent in ("ppo", "r2d2", "sac")}
    r2d2 = sizing.size_run(16, True, "r2d2", envs_per_server("torchbeast_atari"), atari["r2d2"], {})
    assert (r2d2.num_servers, r2d2.num_actors, r2d2.batch_size) == (14, 448, 8)  # the package's batch: not sized
    # PPO's batch is 8 unrolls: its 8 envs are spread over 8 servers, never more envs than a batch
    ppo = sizing.size_run(16, True, "ppo", envs_per_server("torchbeast_atari"), atari["ppo"], {})
    assert (ppo.num_servers, ppo.num_actors, ppo.batch_size) == (8, 8, 8)
    assert "stale policy" in ppo.reason
    bigger = sizing.size_run(16, True, "ppo", envs_per_server("torchbeast_atari"), atari["ppo"], {"batch_size": 64})
    assert (bigger.num_servers, bigger.num_actors, bigger.batch_size) == (8, 64, 64)  # the envs follow the batch
    mujoco_ppo = sizing.size_run(
        16, True, "ppo", envs_per_server("torchbeast_mujoco"), defaults_of("torchbeast_mujoco", []), {}
    )
    assert (mujoco_ppo.num_servers, mujoco_ppo.num_actors, mujoco_ppo.batch_size) == (8, 128, 128)
    # SAC and the small gym envs keep their defaults on any machine
    for cores, gpu in itertools.product((16, 64), (False, True)):
        sac = sizing.size_run(cores, gpu, "sac", envs_per_server("torchbeast_atari"), atari["sac"], {})
        assert sac.values() == {k: atari["sac"][k] for k in sizing.SIZED_FLAGS}
        assert "--replay_ratio" in sac.reason
        for agent in ("impala", "ppo", "r2d2", "sac"):
            gym = defaults_of("torchbeast_gym", [f"--agent={agent}"])
            got = sizing.size_run(cores, gpu, agent, envs_per_server("torchbeast_gym"), gym, {})
            assert got.values() == {k: gym[k] for k in sizing.SIZED_FLAGS}, (agent, cores, gpu)


def test_explicit_flags_win():
    d = defaults_of("torchbeast_atari", [])
    every = sizing.size_run(
        16, True, "impala", envs_per_server("torchbeast_atari"), d, {"num_servers": 3, "num_actors": 9, "batch_size": 4}
    )
    assert (every.num_servers, every.num_actors, every.batch_size, every.auto, every.reason) == (3, 9, 4, (), "")
    servers = sizing.size_run(16, True, "impala", envs_per_server("torchbeast_atari"), d, {"num_servers": 4})
    assert (servers.num_servers, servers.num_actors, servers.batch_size) == (4, 64, 8)  # 16 a server: 8 batches of 8
    actors = sizing.size_run(16, True, "impala", envs_per_server("torchbeast_atari"), d, {"num_actors": 64})
    assert (actors.num_servers, actors.num_actors) == (8, 64)  # the most servers (<= 14) that divide 64
    batch = sizing.size_run(16, True, "impala", envs_per_server("torchbeast_atari"), d, {"batch_size": 16})
    assert (batch.num_servers, batch.num_actors, batch.batch_size) == (14, 126, 16)  # within 8 batches of 16
    assert batch.auto == ("num_servers", "num_actors")
    # on 2 cores a flag given changes nothing else (today's behaviour, a bad pair refused by the checks)
    two = sizing.size_run(2, False, "impala", envs_per_server("torchbeast_atari"), d, {"num_servers": 3})
    assert (two.num_servers, two.num_actors, two.batch_size) == (3, 56, 8)


def test_the_launcher_sees_flags_given_abbreviated_or_with_equals(monkeypatch):
    monkeypatch.setenv(sizing.CORES_ENV, "16")
    values, chosen = launcher_values("torchbeast_atari", ["--disable_cuda", "--num_acto", "24", "--batch_size=8"])
    assert (values["num_servers"], values["num_actors"], values["batch_size"]) == (8, 24, 8)
    assert chosen.auto == ("num_servers",)
    values, chosen = launcher_values("torchbeast_atari", ["--disable_cuda"])
    # 8 servers (a core each) of 8 envs (8 batches of 8), unsplit (the package's SERVER_SPLITS is 1)
    assert (values["num_servers"], values["server_splits"], values["num_actors"], values["batch_size"]) == (8, 1, 64, 8)
    assert chosen.auto == ("num_servers", "num_actors", "batch_size")
    values, chosen = launcher_values("torchbeast_atari", ["--disable_cuda", "--server_splits=2"])
    assert (values["num_servers"], values["server_splits"], values["num_actors"], chosen.auto) == (
        8,
        2,
        64,
        ("num_servers", "num_actors", "batch_size"),
    )


def test_a_package_splitting_its_server_processes_in_two():
    """More than 2 cores, a package's SERVER_SPLITS of 2 (Atari's sizes, none sets it today): each server process
    steps 2 servers in turn; the envs and processes are the unsplit layout's.  Given --num_servers or
    --server_splits, nothing is split; nor on 2 cores."""
    d = defaults_of("torchbeast_atari", [])
    k = envs_per_server("torchbeast_atari")
    gpu = sizing.size_run(16, True, "impala", k, d, {}, 1, 2)
    assert (gpu.num_servers, gpu.server_splits, gpu.num_actors, gpu.batch_size) == (28, 2, 56, 8)
    assert gpu.auto == ("num_servers", "num_actors", "batch_size", "server_splits")
    assert gpu.values()["server_splits"] == 2
    assert (
        "14 env servers x 4 envs = 56 (a core each, 2 left to the learner), at most 8 batches of 8 (an unroll "
        "waits at most ~8 learner steps), each process 2 servers of 2 envs stepped in turn" in gpu.reason
    )
    r2d2 = sizing.size_run(16, True, "r2d2", k, defaults_of("torchbeast_atari", ["--agent=r2d2"]), {}, 1, 2)
    assert (r2d2.num_servers, r2d2.server_splits, r2d2.num_actors) == (28, 2, 448)
    ppo = sizing.size_run(16, True, "ppo", k, defaults_of("torchbeast_atari", ["--agent=ppo"]), {}, 1, 2)
    assert (ppo.num_servers, ppo.server_splits, ppo.num_actors) == (8, 1, 8)  # one env a server: nothing to split
    for given in ({"num_servers": 14}, {"server_splits": 1}, {"server_splits": 4}):
        got = sizing.size_run(16, True, "impala", k, d, given, 1, 2)
        assert got.server_splits == 1 and "server_splits" not in got.values(), given
    two = sizing.size_run(2, False, "impala", k, d, {}, 1, 2)
    assert (two.num_servers, two.server_splits, two.num_actors) == (2, 1, 56)


def test_constraints_hold_on_every_machine():
    """num_actors a multiple of num_servers and of the games; never below the defaults; IMPALA's batch within
    what --total_steps fills."""
    for name, games in [
        ("torchbeast_atari", 1),
        ("torchbeast_procgen", 1),
        ("torchbeast_procgen", 3),
        ("torchbeast_procgen", 5),
        ("torchbeast_procgen", 16),
        ("torchbeast_football", 1),
        ("torchbeast_dmlab", 1),
        ("torchbeast_mujoco", 1),
    ]:
        for agent in ("impala", "ppo", "vtrace", "r2d2"):
            d = defaults_of(name, [f"--agent={agent}"])
            for cores, gpu in itertools.product(range(3, 70), (False, True)):
                for given in ({}, {"num_servers": 5}, {"num_actors": 60}, {"total_steps": 2000}):
                    got = sizing.size_run(cores, gpu, agent, envs_per_server(name), d, given, games)
                    where = (name, games, agent, cores, gpu, given)
                    assert got.num_actors % got.num_servers == 0, where
                    if "num_actors" not in given:
                        assert got.num_actors % games == 0, where
                        # (an on-policy agent's envs stay within its batch: 48 -> 45 for 5 games)
                        assert got.num_actors >= d["num_actors"] // games * games or "num_servers" in given, where
                    if not given and games == 1:
                        assert got.num_servers >= d["num_servers"], where
                    steps = given.get("total_steps", d["total_steps"])
                    if d["batch_size"] * d["unroll_length"] <= steps:
                        assert got.batch_size * d["unroll_length"] <= steps, where


def test_procgen_multi_task_runs_give_every_game_as_many_envs(monkeypatch):
    monkeypatch.setenv(sizing.CORES_ENV, "16")
    values, chosen = launcher_values("torchbeast_procgen", ["--multi_env", "5"])
    assert values["num_actors"] % 5 == 0 and values["num_actors"] % values["num_servers"] == 0
    parser = entry.make_parser(package("torchbeast_procgen"))
    flags = entry.parse_flags(
        package("torchbeast_procgen"),
        ["--multi_env", "5", f"--num_actors={values['num_actors']}", f"--num_servers={values['num_servers']}"],
        parser=parser,
    )  # procgen's own check_flags accepts it
    assert flags.env.count(",") == 4


def test_usable_cores_override(monkeypatch):
    monkeypatch.setenv(sizing.CORES_ENV, "12")
    assert sizing.usable_cores() == 12
    monkeypatch.setenv(sizing.CORES_ENV, "zero")
    with pytest.raises(Exception, match="POLYBEAST_CORES"):
        sizing.usable_cores()
    monkeypatch.delenv(sizing.CORES_ENV)
    import os

    assert sizing.usable_cores() == len(os.sched_getaffinity(0))


def test_the_learner_takes_the_cores_its_servers_leave(monkeypatch):
    """auto_torch_threads: cores less those the server processes keep busy (their package's SERVER_CORES each):
    Atari's servers leave a 2-core learner one thread; Procgen's, idle beside a CPU learner, leave it both; under
    --deterministic a package with LOCKSTEP_CORES (Atari's) gives its learner every core, the others as before."""
    from argparse import Namespace

    from rl_core.config.env_package import EnvPackage
    from rl_core.runtime.device import auto_torch_threads

    def threads(name, cores, basename="unix:/tmp/x", num_servers=8, server_splits=1, deterministic=False):
        monkeypatch.setenv(sizing.CORES_ENV, str(cores))
        flags = Namespace(
            pipes_basename=basename, num_servers=num_servers, server_splits=server_splits, deterministic=deterministic
        )
        pkg = EnvPackage(package(name))
        return auto_torch_threads(flags, pkg.SERVER_CORES, pkg.LOCKSTEP_CORES)

    assert EnvPackage(package("torchbeast_atari")).SERVER_CORES == 1.0  # the default: a core per server
    assert threads("torchbeast_atari", 2, num_servers=2) == 1
    assert threads("torchbeast_atari", 16, num_servers=8) == 8
    assert threads("torchbeast_atari", 16, num_servers=14, server_splits=2) == 9  # 7 processes
    assert threads("torchbeast_procgen", 2) == 2  # 8 servers x 0.05 of a core
    assert threads("torchbeast_procgen", 16) == 16
    assert threads("torchbeast_procgen", 2, num_servers=32) == 1  # 1.6 cores busy: rounded to 2
    assert threads("torchbeast_atari", 2, basename="10.0.0.2:4000") == 2  # TCP servers run elsewhere
    assert threads("torchbeast_atari", 2, num_servers=2, deterministic=True) == 2  # PPO's Atari default
    assert threads("torchbeast_atari", 16, num_servers=8, deterministic=True) == 16
    assert threads("torchbeast_minatar", 2, num_servers=2, deterministic=True) == 1  # its small net loses
    assert threads("torchbeast_gym", 2, num_servers=1, deterministic=True) == 1


def test_a_resumed_run_keeps_what_it_was_sized_with(tmp_path, monkeypatch):
    monkeypatch.setenv(sizing.CORES_ENV, "2")
    rundir = tmp_path / "run"
    rundir.mkdir()
    (rundir / "model.tar").write_bytes(b"")
    (rundir / "meta.json").write_text(
        json.dumps(
            {
                "sizing": {
                    "num_servers": 14,
                    "num_actors": 448,
                    "batch_size": 56,
                    "cores": 16,
                    "gpu": True,
                    "auto": ["num_servers", "num_actors", "batch_size"],
                    "reason": "...",
                }
            }
        )
    )
    argv = [f"--savedir={tmp_path}", "--xpid=run"]
    values, chosen = launcher_values("torchbeast_atari", argv)
    assert (values["num_servers"], values["num_actors"], values["batch_size"]) == (14, 448, 56)
    assert chosen.reason.startswith("resuming run run: --num_servers 14, --num_actors 448, --batch_size 56")
    values, _ = launcher_values("torchbeast_atari", [*argv, "--batch_size=32"])  # a flag given still wins
    assert (values["num_servers"], values["num_actors"], values["batch_size"]) == (14, 448, 32)
    values, _ = launcher_values("torchbeast_atari", [f"--savedir={tmp_path}", "--xpid=other"])  # a new run
    assert (values["num_servers"], values["num_actors"], values["batch_size"]) == (2, 56, 8)


@pytest.mark.multiprocess
def test_the_launcher_logs_its_sizing_records_it_and_its_servers_follow(tmp_path, monkeypatch):
    """6 usable cores (said by $POLYBEAST_CORES), a CPU learner: Atari gets 3 servers x 19 envs, which the
    servers host (the learner refuses servers of another size), the sizing line says why and meta.json
    records the values used."""
    from tests.proc_utils import run, sockets_left

    monkeypatch.setenv(sizing.CORES_ENV, "6")
    args = [
        "--disable_cuda",
        "--unroll_length=5",
        "--total_steps=320",
        "--disable_final_test",
        "--log_interval=1",
        f"--savedir={tmp_path / 'runs'}",
        "--xpid=sized",
        f"--pipes_basename=unix:{tmp_path}/pipe",
    ]
    result = run("torchbeast_atari.polybeast", *args, output=str(tmp_path / "out"), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    line = next(x for x in result.stdout.splitlines() if "] sizing: " in x)
    assert line.endswith(
        "sizing: --agent impala, 57 envs on 3 env servers (19 each), learner batches of 8 x 5 = 40 steps (~8 "
        "batches), --total_steps 320; chosen for 6 usable cores, learner on cpu, --agent impala: 3 env servers x 19 "
        "envs = 57 (a core each, 3 left to the learner); set --num_servers/--num_actors/--batch_size to override"
    ), line
    meta = json.loads((tmp_path / "runs" / "sized" / "meta.json").read_text())
    assert meta["sizing"]["num_servers"] == 3 and meta["sizing"]["num_actors"] == 57
    assert meta["sizing"]["server_splits"] == 1
    assert meta["sizing"]["batch_size"] == 8 and meta["sizing"]["cores"] == 6 and meta["sizing"]["gpu"] is False
    assert meta["sizing"]["auto"] == ["num_servers", "num_actors", "batch_size"]
    assert (meta["flags"]["num_servers"], meta["flags"]["num_actors"], meta["flags"]["batch_size"]) == (3, 57, 8)
    assert meta["flags"]["server_splits"] == 1
    assert meta["success"] is True
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_env_ceiling_prints_steps_and_frames_per_process_count():
    """benchmarks/env_ceiling.py: one row per process count, steps/s and frames/s (CartPole: 1 frame a step)."""
    import subprocess
    import sys

    from tests.proc_utils import REPO

    out = subprocess.run(
        [
            sys.executable,
            "benchmarks/env_ceiling.py",
            "--package",
            "torchbeast_gym",
            "--seconds",
            "0.3",
            "--procs",
            "1",
            "2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("env ceiling: torchbeast_gym CartPole-v1 on ") and lines[0].endswith("1 step = 1 frame")
    rows = [line.split() for line in lines[2:4]]
    assert [row[0] for row in rows] == ["1", "2"]
    for row in rows:
        assert int(row[1].replace(",", "")) > 0 and row[1] == row[2]  # frames = steps


@pytest.mark.multiprocess
def test_server_overlap_prints_a_row_per_layout_of_processes_and_splits():
    """benchmarks/server_overlap.py: real Pong servers, one process and one of two splits, answered after 1 ms."""
    import subprocess
    import sys

    from tests.proc_utils import REPO

    cores = sorted(os.sched_getaffinity(0))
    out = subprocess.run(
        [
            sys.executable,
            "benchmarks/server_overlap.py",
            "--envs",
            "2",
            "--layouts",
            "1",
            "1x2",
            "--seconds",
            "1",
            "--latency_ms",
            "1",
            "--server_cores",
            str(cores[-1]),
            "--inference_cores",
            str(cores[0]),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in out.stdout.splitlines()
        if line.startswith("| 1 x")
    ]
    assert [row[:2] for row in rows] == [["1 x 1", "2"], ["1 x 2", "1"]]
    for row in rows:
        assert float(row[3].replace(",", "")) > 0 and row[5].endswith("%")
