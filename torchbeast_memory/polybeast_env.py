"""Env servers for POPGym and MiniGrid memory tasks."""

from rl_core.runtime.entry import env_main
from torchbeast_memory import env


def main(argv=None):
    env_main(env, argv)


if __name__ == "__main__":
    main()
