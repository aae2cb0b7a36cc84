"""Test tiers.  ``learning`` tests train through the runtime to a threshold (minutes each); the
development tier is ``pytest -m "not learning"``.  Under pytest-xdist (``-n 2 --dist loadgroup``,
the README's command) the learning tests form one group, run one after another on one worker from
the start (they are the long pole), while the other worker takes the rest: two training runs never
share the 2 cores, and no learning run's wall-clock deadline is halved."""

import os

import pytest

# Runs the tests start are sized as on the 2-core machine the tests and their thresholds were written
# for, whatever cores the test machine has (rl_core/sizing.py; a test that wants another size sets it).
os.environ.setdefault("POLYBEAST_CORES", "2")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    learning = [item for item in items if item.get_closest_marker("learning")]
    for item in learning:
        item.add_marker(pytest.mark.xdist_group("learning"))
    items[:] = learning + [item for item in items if not item.get_closest_marker("learning")]
