"""The learner alone, against running env servers."""

from rl_core.runtime.entry import learner_main
from torchbeast_minatar import env


def main(argv=None):
    learner_main(env, argv)


if __name__ == "__main__":
    main()
