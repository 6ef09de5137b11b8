"""A YAML document is bounded before anything is built from it: a "billion laughs" (aliases of aliases) is refused in
one line by every loader (validate, train, sweep, suites, the app's upload), quickly, and leaves no run behind."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from backend.__main__ import main


def laughs(levels: int, width: int = 9) -> str:
    """The classic: each level a list of ``width`` aliases of the level below (``width**levels`` values)."""
    lines = ["name: laughs", "_lol: &a0 'lol'"]
    for i in range(1, levels + 1):
        lines.append(f"_l{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    lines.append(f"alternate: {{blocks: *a{levels}}}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def bomb(tmp_path) -> Path:
    p = tmp_path / "laughs.yaml"
    p.write_text(laughs(9))
    assert len(p.read_bytes()) < 1000
    return p


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "{bomb}"],
        ["train", "{bomb}"],
        ["prepare-data", "{bomb}"],
        ["sweep", "{bomb}", "--grid", "train.lr=1e-3,2e-3"],
        ["evaluate", "--suite", "{bomb}", "--model", "x"],
    ],
)
def test_billion_laughs_is_refused_in_one_line_by_every_command(bomb, argv, capsys, isolated_runs_dir):
    t0 = time.monotonic()
    rc = main([a.format(bomb=bomb) for a in argv])
    err = capsys.readouterr().err.strip()
    assert time.monotonic() - t0 < 10
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "expands to more than" in err and "aliases" in err
    assert not isolated_runs_dir.exists() or not any(isolated_runs_dir.iterdir())


def test_seven_levels_no_longer_trains(tmp_path, capsys):
    p = tmp_path / "seven.yaml"
    p.write_text(laughs(7))
    assert main(["validate", str(p)]) == 2
    assert "expands to more than" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: &a [*a]\n", "contains it"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper"),
        ("a: " + "{b: " * 200 + "1" + "}" * 200 + "\n", "nested deeper"),
        ("x: &x 1\n" + "".join(f"k{i}: *x\n" for i in range(1100)), "aliases"),
        ("name: big\n# " + "x" * (1 << 20) + "\n", "characters"),
    ],
    ids=["recursive", "deep-lists", "deep-maps", "many-aliases", "over-1MiB"],
)
def test_other_bounds_each_refused_in_one_line(tmp_path, capsys, text, words):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_override_bomb_is_refused(capsys):
    assert main(["validate", "--set", "alternate.blocks=" + "[" * 3000 + "]" * 3000]) == 2
    assert "nested" in capsys.readouterr().err


def test_app_upload_refuses_the_bomb(bomb, monkeypatch):
    from app.launch_tab import load_config_file

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(bomb.parent))  # where Gradio puts what the browser sent

    values, message, cfg = load_config_file(str(bomb))
    assert values is None and cfg is None
    assert "expands to more than" in message


def test_a_normal_config_with_aliases_still_loads(tmp_path):
    from backend.engine.config import load_config

    p = tmp_path / "ok.yaml"
    p.write_text("name: ok\n_common: &lr 0.001\ntrain: {lr: *lr}\n")
    with pytest.raises(Exception, match="_common"):  # unknown key, but read: aliases themselves are fine
        load_config(p)
    p.write_text("name: ok\ntrain: &t {lr: 0.001}\n")
    assert load_config(p)["train"]["lr"] == 0.001
