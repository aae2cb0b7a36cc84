"""DeepMind Lab levels for the polybeast runtime: env.py plus the three entry modules."""
