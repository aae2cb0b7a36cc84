"""Procgen (Chaser, IMPALA ResNet, T=50, B=32) training throughput against the machine's ceiling.

    python benchmarks/procgen_throughput.py [--num_actors 8 16] [--seconds 60] [--model resnet]

See benchmarks/throughput.py for what (a)-(d), the ceiling and the ratio are.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from throughput import PROCGEN, main

if __name__ == "__main__":
    main(PROCGEN, default_model="resnet", default_T=50)
