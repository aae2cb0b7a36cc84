#!/usr/bin/env python
"""Write list_atari_games.txt: every Atari game the installed ale-py can run.

One line per game, ``<Game>NoFrameskip-v4 <minimal action count>``, sorted by
name. The real ALE is asked: every ROM that ale-py ships is checked with
``ALEInterface.isSupportedROM`` (the ALE refuses multiplayer-only ROMs such as
combat, and ``loadROM`` on them would exit the process), loaded, and its
minimal action set counted.

    python scripts/list_atari_games.py            # rewrite the file
    python scripts/list_atari_games.py --check    # exit 1 if the file is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import ale_py
import ale_py.roms

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO_ROOT / "list_atari_games.txt"


def game_name(rom_id: str) -> str:
    """ale-py's rom id -> name conversion ("montezuma_revenge" -> "MontezumaRevenge")."""
    return rom_id.title().replace("_", "")


def list_games() -> list[tuple[str, int]]:
    """[("AdventureNoFrameskip-v4", 18), ...] for every ROM the installed ALE supports, sorted by id."""
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    games = []
    for rom_id in ale_py.roms.get_all_rom_ids():
        path = ale_py.roms.get_rom_path(rom_id)
        ale = ale_py.ALEInterface()
        if not ale.isSupportedROM(path):
            continue
        ale.loadROM(path)
        games.append((f"{game_name(rom_id)}NoFrameskip-v4", len(ale.getMinimalActionSet())))
    return sorted(games)


def render(games: list[tuple[str, int]]) -> str:
    return "".join(f"{env_id} {n}\n" for env_id, n in games)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--check", action="store_true", help="compare with the file instead of writing it")
    args = parser.parse_args(argv)
    text = render(list_games())
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run python scripts/list_atari_games.py", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {text.count(chr(10))} games to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
