"""Atari (Pong, AtariNet, T=20, B=32) training throughput against the machine's ceiling.

    python benchmarks/atari_throughput.py [--num_actors 8 16] [--seconds 60] [--device cpu cuda]

See benchmarks/throughput.py for what (a)-(d), the ceiling and the ratio are.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from throughput import ATARI, main

if __name__ == "__main__":
    main(ATARI, default_model="atari", default_T=20)
