"""Env servers hosting Google Research Football scenarios (envpool)."""

from rl_core.runtime.entry import env_main
from torchbeast_football import env


def main(argv=None):
    env_main(env, argv)


if __name__ == "__main__":
    main()
