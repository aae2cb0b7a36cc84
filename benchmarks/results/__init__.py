"""The benchmark suite's library, one role a module; ``python benchmarks/suite.py`` is its command line.

load (run directories, run summaries, anchors) is the bottom layer; groups (a group of runs' cells and curve band) sits
on it; launch (``run``), table (``table``), collect (``collect``) and render (``render``, with render_rows and
render_figure) each import those, not each other.
"""
