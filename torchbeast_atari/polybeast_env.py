"""Env servers hosting Atari games (ALE)."""

from rl_core.runtime.entry import env_main
from torchbeast_atari import env


def main(argv=None):
    env_main(env, argv)


if __name__ == "__main__":
    main()
