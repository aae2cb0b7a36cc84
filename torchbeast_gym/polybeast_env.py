"""Env servers for gymnasium environments."""

from rl_core.runtime.entry import env_main
from torchbeast_gym import env


def main(argv=None):
    env_main(env, argv)


if __name__ == "__main__":
    main()
