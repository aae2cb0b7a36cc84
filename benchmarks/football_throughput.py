"""Google Research Football (academy_empty_goal_close, SEED RL's four-stage IMPALA ResNet, T=32,
B=32) training throughput against the machine's ceiling.

    python benchmarks/football_throughput.py [--num_actors 16 32] [--seconds 240] [--model resnet]

See benchmarks/throughput.py for what (a)-(d), the ceiling and the ratio are.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from throughput import FOOTBALL, main

if __name__ == "__main__":
    main(FOOTBALL, default_model="resnet", default_T=32, default_seconds=240.0)  # a CPU update takes ~10 s
