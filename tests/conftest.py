"""Test tiers.  ``learning`` tests train through the runtime to a threshold (minutes each); the
development tier is ``pytest -m "not learning"``.  Under pytest-xdist (``-n 2 --dist loadgroup``,
the README's command) the learning tests form one group, run one after another on one worker from
the start (they are the long pole), while the other worker takes the rest: two training runs never
share the 2 cores, and no learning run's wall-clock deadline is halved."""

import pytest


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    learning = [item for item in items if item.get_closest_marker("learning")]
    for item in learning:
        item.add_marker(pytest.mark.xdist_group("learning"))
    items[:] = learning + [item for item in items if not item.get_closest_marker("learning")]
