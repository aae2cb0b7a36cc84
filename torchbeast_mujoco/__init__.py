"""MuJoCo continuous control (gymnasium's HalfCheetah-v5, Hopper-v4, ...), simulated by envpool."""
