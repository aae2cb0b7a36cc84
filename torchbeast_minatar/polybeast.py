"""Launcher: env servers as child processes plus the learner."""

from rl_core.runtime.entry import launcher_main
from torchbeast_minatar import env


def main(argv=None):
    launcher_main(env, argv)


if __name__ == "__main__":
    main()
