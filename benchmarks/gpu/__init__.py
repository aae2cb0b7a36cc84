"""The GPU suite's library, one role a module; ``python benchmarks/gpu_suite.py`` is its command line.

budget (the stages and each one's share of --budget_s) and children (a stage's subprocess and its stop) are the bottom
layer; stages (what each stage runs and measures) sits on them and on benchmarks/results/load.py; tables (the markdown
of the stages' results) on budget.
"""
