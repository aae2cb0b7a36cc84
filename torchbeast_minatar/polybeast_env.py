"""Env servers for MinAtar's games."""

from rl_core.runtime.entry import env_main
from torchbeast_minatar import env


def main(argv=None):
    env_main(env, argv)


if __name__ == "__main__":
    main()
