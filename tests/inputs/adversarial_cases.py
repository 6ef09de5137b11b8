"""The adversarial input cases (configs, overrides, corpora, CKA texts, environment, executors): each builds its
input in a folder and returns the CLI argv that reads it. ``test_adversarial_inputs.py`` runs them all."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

Case = Callable[[Path], list[str]]
GOOD_TEXT = "".join(f"Line {i} of a corpus that is plain text, about words and letters.\n" for i in range(60))


def _cfg(text: str | bytes) -> Case:
    def make(d: Path) -> list[str]:
        p = d / "c.yaml"
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        return ["validate", str(p)]

    return make


def _set(*items: str) -> Case:
    return lambda d: ["validate", *[a for i in items for a in ("--set", i)]]


def _corpus(name: str, write: Callable[[Path], None], *sets: str) -> Case:
    def make(d: Path) -> list[str]:
        p = d / name
        write(p)
        return ["prepare-data", "--set", f"data.corpus={p}", *[a for s in sets for a in ("--set", s)]]

    return make


def _jsonl(*values) -> Callable[[Path], None]:
    def write(p: Path) -> None:
        rows = [{"text": t} for t in GOOD_TEXT.splitlines()] + [{"text": v} for v in values]
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))

    return write


def _parquet(array: pa.Array) -> Callable[[Path], None]:
    return lambda p: pq.write_table(pa.table({"text": array}), p)


def _texts(name: str, data: bytes) -> Case:
    def make(d: Path) -> list[str]:
        p = d / name
        p.write_bytes(data)
        return ["cka", "--a", "x", "--b", "y", "--texts", str(p), "--out", str(d / "o.json")]

    return make


CASES: dict[str, tuple[Case, str]] = {
    # ---- config files: (how it is built, what must happen: "refused" (exit 2, one line) or "ok")
    "yaml-empty": (_cfg(""), "refused"),
    "yaml-only-comment": (_cfg("# nothing\n"), "refused"),
    "yaml-top-list": (_cfg("- a\n- b\n"), "refused"),
    "yaml-top-scalar": (_cfg("42\n"), "refused"),
    "yaml-tab-indent": (_cfg("train:\n\tlr: 1\n"), "refused"),
    "yaml-utf16": (_cfg("name: u16\n".encode("utf-16")), "refused"),
    "yaml-latin1": (_cfg("name: caf\xe9\n".encode("latin-1")), "refused"),
    "yaml-utf8-bom": (_cfg("\ufeffname: bom\nrecipe: mlm\n"), "ok"),
    "yaml-binary": (_cfg(bytes(range(256))), "refused"),
    "yaml-nul": (_cfg(b"name: a\x00b\n"), "refused"),
    "yaml-duplicate-key": (_cfg("train: {lr: 1e-3}\ntrain: {seed: 1}\n"), "refused"),
    "yaml-merge-key": (_cfg("_b: &b {lr: 0.001}\ntrain:\n  <<: *b\n"), "refused"),  # _b is not a config key
    "yaml-python-tag": (_cfg("name: !!python/object/apply:os.system ['true']\n"), "refused"),
    "yaml-binary-tag": (_cfg("name: !!binary aGVsbG8=\n"), "refused"),
    "yaml-date-name": (_cfg("name: 2024-01-01\nrecipe: mlm\n"), "refused"),  # YAML's date, named as such
    "yaml-lr-nan": (_cfg("train: {lr: .nan}\n"), "refused"),
    "yaml-lr-inf": (_cfg("train: {lr: .inf}\n"), "refused"),
    "yaml-lr-negative": (_cfg("train: {lr: -1}\n"), "refused"),
    "yaml-steps-10e400": (_cfg("phases: {main: {steps: " + "9" * 400 + "}}\n"), "refused"),
    "yaml-batch-bool": (_cfg("train: {batch_size: true}\n"), "refused"),
    "yaml-name-null": (_cfg("name: null\n"), "refused"),
    "yaml-name-traversal": (_cfg("name: ../../etc\n"), "refused"),
    "yaml-name-300-chars": (_cfg("name: " + "a" * 300 + "\n"), "refused"),
    "yaml-two-documents": (_cfg("name: a\n---\nname: b\n"), "refused"),
    "yaml-complex-key": (_cfg("? [a, b]\n: 1\n"), "refused"),
    "yaml-float-key": (_cfg("1.5: x\n"), "refused"),
    "yaml-phases-empty-list": (_cfg("phases: []\n"), "refused"),
    "yaml-recipe-unknown": (_cfg("recipe: nope\n"), "refused"),
    "yaml-seq-len-zero": (_cfg("train: {seq_len: 0}\n"), "refused"),
    "yaml-seed-1e30": (_cfg("train: {seed: 1e30}\n"), "refused"),
    "yaml-aliases-5-levels": (
        _cfg(
            "".join(
                f"_a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" if i else "_a0: &a0 x\n" for i in range(6)
            )
        ),
        "refused",
    ),  # fmt: skip
    "yaml-is-a-folder": (lambda d: ["validate", str(d)], "refused"),
    "yaml-missing": (lambda d: ["validate", str(d / "none.yaml")], "refused"),
    # ---- --set overrides
    "set-empty-value": (_set("train.lr="), "refused"),
    "set-no-key": (_set("=5"), "refused"),
    "set-list-for-float": (_set("train.lr=[1,2]"), "refused"),
    "set-lr-1e999": (_set("train.lr=1e999"), "refused"),
    "set-hex-int": (_set("recipe=mlm", "train.seed=0x10"), "ok"),  # YAML's hex integer: seed 16
    "set-shell-name": (_set("name=$(rm -rf x)"), "refused"),
    "set-unknown-section": (_set("nope.x=1"), "refused"),
    "set-deep-flow": (_set("alternate.blocks=" + "{a: " * 100 + "1" + "}" * 100), "refused"),
    "set-precision-fp8": (_set("train.precision=fp8"), "refused"),
    "set-fp16-cpu": (_set("train.precision=fp16"), "refused"),
    # ---- corpora (prepare-data reads them: the token store builds from the same readers training uses)
    "jsonl-text-dict": (_corpus("c.jsonl", _jsonl({"a": 1})), "refused"),
    "jsonl-text-bool": (_corpus("c.jsonl", _jsonl(True)), "refused"),
    "jsonl-text-float": (_corpus("c.jsonl", _jsonl(1.5)), "refused"),
    "jsonl-text-null-skip": (_corpus("c.jsonl", _jsonl(None), "data.skip_non_text=true", "train.seq_len=16"), "ok"),
    "jsonl-line-string": (_corpus("c.jsonl", lambda p: p.write_text('"just a string"\n')), "refused"),
    "jsonl-utf16": (_corpus("c.jsonl", lambda p: p.write_bytes('{"text": "a"}\n'.encode("utf-16"))), "refused"),
    "jsonl-empty": (_corpus("c.jsonl", lambda p: p.write_text("")), "refused"),
    "jsonl-no-text-key": (_corpus("c.jsonl", lambda p: p.write_text('{"body": "a"}\n')), "refused"),
    "csv-latin1": (_corpus("c.csv", lambda p: p.write_bytes("text\ncaf\xe9\n".encode("latin-1"))), "refused"),
    "csv-header-only": (_corpus("c.csv", lambda p: p.write_text("text\n")), "refused"),
    "csv-no-header": (
        _corpus("c.csv", lambda p: p.write_text("A sentence that reads like data, not a header\n")),
        "refused",
    ),  # fmt: skip
    "csv-nul": (_corpus("c.csv", lambda p: p.write_bytes(b"text\na\x00b\n")), "refused"),
    "parquet-int-column": (_corpus("c.parquet", _parquet(pa.array(list(range(100))))), "refused"),
    "parquet-list-column": (_corpus("c.parquet", _parquet(pa.array([["a", "b"]] * 50))), "refused"),
    "parquet-all-null": (_corpus("c.parquet", _parquet(pa.array([None] * 50, pa.string()))), "refused"),
    "parquet-binary": (_corpus("c.parquet", _parquet(pa.array([b"x y z"] * 50, pa.binary()))), "refused"),
    "parquet-truncated": (_corpus("c.parquet", lambda p: p.write_bytes(b"PAR1" + b"\x00" * 20)), "refused"),
    "json-top-string": (_corpus("c.json", lambda p: p.write_text('"text"')), "refused"),
    "json-number-column": (_corpus("c.json", lambda p: p.write_text(json.dumps({"text": [1, 2, 3]}))), "refused"),
    "txt-utf16": (_corpus("c.txt", lambda p: p.write_bytes(GOOD_TEXT.encode("utf-16"))), "refused"),
    "txt-empty": (_corpus("c.txt", lambda p: p.write_text("")), "refused"),
    "txt-whitespace": (_corpus("c.txt", lambda p: p.write_text(" \n\t\n \n")), "refused"),
    "txt-latin1": (_corpus("c.txt", lambda p: p.write_bytes("caf\xe9 au lait\n".encode("latin-1") * 40)), "refused"),
    "corpus-empty-folder": (lambda d: ["prepare-data", "--set", f"data.corpus={d}/"], "refused"),
    "corpus-missing": (lambda d: ["prepare-data", "--set", f"data.corpus={d}/none.txt"], "refused"),
    "corpus-unsupported-suffix": (_corpus("c.md", lambda p: p.write_text(GOOD_TEXT)), "refused"),
    # ---- CKA texts (the same cell rule)
    "cka-jsonl-number": (_texts("t.jsonl", b'{"text": "a"}\n{"text": 5}\n'), "refused"),
    "cka-jsonl-null": (_texts("t.jsonl", b'{"text": "a"}\n{"text": null}\n'), "refused"),
    "cka-txt-nul": (_texts("t.txt", b"a\x00b\n"), "refused"),
    "cka-txt-latin1": (_texts("t.txt", "caf\xe9\n".encode("latin-1")), "refused"),
    # ---- executors
    "sweep-slurm-no-conf": (
        lambda d: [
            "sweep",
            "--grid",
            "train.lr=1e-3,2e-3",
            "--executor",
            "slurm",
            "--out",
            str(d / "sw"),
            "--set",
            f"slurm.partition=x{d.name[:0]}",
        ],
        "refused",
    ),  # fmt: skip
}

# ---- environment variables: (variable -> value built in the folder, argv, expected)
ENV_CASES: dict[str, tuple[Callable[[Path], dict], Case, str]] = {
    "env-runs-dir-is-a-file": (lambda d: {"DETOUR_RUNS_DIR": str(_file(d))}, _set("recipe=mlm", "name=e1"), "ok"),
    "env-cache-dir-is-a-file": (
        lambda d: {"DETOUR_CACHE_DIR": str(_file(d))},
        _corpus("c.txt", lambda p: p.write_text(GOOD_TEXT)),
        "refused",
    ),  # fmt: skip
    "env-slurm-conf-missing": (
        lambda d: {"SLURM_CONF": str(d / "none.conf")},
        lambda d: ["sweep", "--grid", "train.lr=1e-3,2e-3", "--executor", "slurm"],
        "refused",
    ),  # fmt: skip
    "env-path-without-slurm": (
        lambda d: {"PATH": str(d)},
        lambda d: ["sweep", "--grid", "train.lr=1e-3,2e-3", "--executor", "slurm"],
        "refused",
    ),  # fmt: skip
}


def _file(d: Path) -> Path:
    p = d / "a-file"
    p.write_text("x")
    return p
