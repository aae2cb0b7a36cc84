"""MinAtar's games (Young & Tian 2019) for the polybeast runtime: env.py plus the three entry modules."""
