"""Test tiers.  ``learning`` tests train through the runtime to a threshold (minutes each); the
development tier is ``pytest -m "not learning"``.  ``multiprocess`` tests start processes (the launcher
and its env servers, torchrun, a script, a ``python -c`` child; every learning test too) or play real envs
for tens of seconds in process (those few say so where they are marked); the fast tier,
``pytest -m "not learning and not multiprocess"``, is the rest: a few minutes on 2 cores.

Under pytest-xdist (``-n 2 --dist loadgroup``,
the README's command) the learning tests form one group, run one after another on one worker from
the start (they are the long pole), so that no two learning runs share the machine.  The other worker
meanwhile takes the rest, trainings among them: test_distributed.py's 2-rank torchrun runs (two learners and
their env servers), test_runtime.py's, test_faults*.py's and the other end-to-end tests' runs.  So a learning
run shares the 2 cores with those most of the time, and so does every other test with a deadline: the
learning runs' deadline (RUN_DEADLINE_S, tests/test_learning.py) and the suite's timing bounds leave room for
that, or count events instead of timing them."""

import os

import pytest

# Runs the tests start are sized as on the 2-core machine the tests and their thresholds were written
# for, whatever cores the test machine has (rl_core/config/sizing.py; a test that wants another size sets it).
os.environ.setdefault("POLYBEAST_CORES", "2")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    learning = [item for item in items if item.get_closest_marker("learning")]
    for item in learning:
        item.add_marker(pytest.mark.xdist_group("learning"))
    items[:] = learning + [item for item in items if not item.get_closest_marker("learning")]
