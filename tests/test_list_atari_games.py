from pathlib import Path

import pytest

from tests.proc_utils import load_script
from torchbeast_atari import env as atari_env

REPO = Path(__file__).resolve().parents[1]


# not a process: loads every ROM ale-py ships (about 35 s on 2 loaded cores), kept out of the fast tier
@pytest.mark.multiprocess
def test_committed_list_matches_the_installed_ale():
    script = load_script("list_atari_games")
    games = script.list_games()
    committed = (REPO / "list_atari_games.txt").read_text()
    assert script.render(games) == committed, "stale list: run python scripts/list_atari_games.py"
    names = dict(games)
    assert names["PongNoFrameskip-v4"] == 6
    assert names["BreakoutNoFrameskip-v4"] == 4
    assert names["MontezumaRevengeNoFrameskip-v4"] == 18
    # multiplayer-only ROMs that the ALE refuses are left out
    assert "CombatNoFrameskip-v4" not in names
    assert len(games) > 100
    # the env module reads the same table
    assert atari_env.atari_games() == names


def test_env_asks_the_ale_when_the_list_file_is_absent(monkeypatch, tmp_path):
    monkeypatch.setattr(atari_env, "GAMES_LIST", tmp_path / "missing.txt")
    monkeypatch.setattr(atari_env.ale_py.roms, "get_all_rom_ids", lambda: ["breakout", "combat", "pong"])
    atari_env.atari_games.cache_clear()
    atari_env._games_by_key.cache_clear()
    try:
        # combat is refused by the ALE (multiplayer only) and left out, as in the script
        assert atari_env.atari_games() == {"BreakoutNoFrameskip-v4": 4, "PongNoFrameskip-v4": 6}
        assert atari_env.canonical_env_id("ALE/Pong-v5") == "PongNoFrameskip-v4"
    finally:
        atari_env.atari_games.cache_clear()
        atari_env._games_by_key.cache_clear()
