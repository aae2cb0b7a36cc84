"""Google Research Football (envpool) for the polybeast runtime: env.py plus the three entry modules."""
