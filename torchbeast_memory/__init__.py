"""Memory tasks from POPGym and MiniGrid for the polybeast runtime: env.py plus the three entry modules."""
