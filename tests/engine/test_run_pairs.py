"""The catalogue's "pair" kind (``rundir.pairs``): a detour run and its MLM run, by their configs' ``_meta`` or by
their names' suffixes; the one rule the app's default models follow (``app.newest_pair``)."""

from __future__ import annotations

from backend.core import atomic
from backend.engine import rundir
from backend.engine.config import default_config


def run(root, name: str, pair: str | None = None, role: str | None = None, text: str | None = None):
    d = root / name
    d.mkdir(parents=True)
    cfg = {**default_config(), "name": name}
    if pair:
        cfg["_meta"] = {"pair": pair, "role": role}
    if text is None:
        atomic.write_yaml(d / "config.yaml", cfg)
    else:
        (d / "config.yaml").write_text(text)
    return rundir.RunInfo(name, d, {})


def test_pairs_by_meta_or_suffix_newest_first_and_an_unreadable_config_in_none(tmp_path):
    runs = [  # newest first, as the app lists them
        run(tmp_path, "x-detour", text=""),  # its config cannot be read: not half of pair 'x'
        run(tmp_path, "x-mlm"),
        run(tmp_path, "second", "b", "mlm"),  # named by _meta only
        run(tmp_path, "first", "b", "detour"),
        run(tmp_path, "a-detour"),  # named by suffix only
        run(tmp_path, "a-mlm"),
        run(tmp_path, "c-detour"),  # half a pair
        run(tmp_path, "c-mlm", text="name: c-mlm\n"),
    ]
    (tmp_path / "elsewhere.yaml").write_text("name: c-mlm\n")
    (tmp_path / "c-mlm" / "config.yaml").unlink()
    (tmp_path / "c-mlm" / "config.yaml").symlink_to(tmp_path / "elsewhere.yaml")  # links out of its run: not read
    assert rundir.pairs(runs) == [("b", "first", "second"), ("a", "a-detour", "a-mlm")]
    assert rundir.pair_of("plain", {}) == (None, None)
    assert rundir.pair_of("b-mlm", {"_meta": {"pair": "z", "role": "detour"}}) == ("z", "detour")  # _meta wins
