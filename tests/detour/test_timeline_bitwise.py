"""Existing configs train bit-identical weights after the timeline rewrite (issue 26).

``timeline_checksums.json`` holds sha256 of ``final/model.safetensors`` for tiny fp32 CPU runs of each existing
recipe, recorded with the code *before* phases became a list (commit ca0f178), on the CPU and torch named in the
file. The same configs are trained here and compared; on another CPU or torch the numbers may differ for reasons
that have nothing to do with the recipe (kernels, ISA), so that comparison is skipped there, while the comparison of
each old mapping form with its equivalent list form (same machine, no recorded value) always runs.

Re-record (only with the pre-change code checked out): ``python tests/detour/test_timeline_bitwise.py --record``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # conftest, when run as a script

from conftest import TINY_MODERNBERT, save_tiny_model  # noqa: E402

CHECKSUMS = Path(__file__).with_name("timeline_checksums.json")

BASE = {
    "data.corpus": "demo",
    "data.heldout_fraction": 0.1,
    "train.seq_len": 32,
    "train.batch_size": 2,
    "train.lr": 1e-3,
    "train.precision": "fp32",
    "train.compile": False,
    "model.attn_implementation": "sdpa",
    "logging.log_every": 1,
    "logging.eval_every": 100,
    "logging.eval_batches": 1,
    "logging.checkpoint_every": 100,
}
SCRATCH = "{" + ", ".join(f"{k}: {v}" for k, v in TINY_MODERNBERT.items()) + "}"

# name -> overrides; every case is a tiny run (2 x 32 tokens per step, a handful of steps)
CASES: dict[str, dict] = {
    "clm_detour": {"recipe": "clm_detour", "phases.main.steps": 3, "phases.decay.steps": 2},
    "mlm": {"recipe": "mlm", "phases.main.steps": 3, "phases.decay.steps": 2},
    "pair": {"recipe": "pair", "phases.main.steps": 3, "phases.decay.steps": 2},
    "pretrain": {"recipe": "pretrain", "model.name": "from_scratch", "model.from_scratch": SCRATCH,
                 "model.tokenizer": "BUNDLED", "phases.main.steps": 3, "phases.decay.steps": 1},
    "warmup_freeze": {"recipe": "clm_detour", "phases.warmup.steps": 2, "phases.main.steps": 3,
                      "phases.main.freeze.layers": "0-1", "phases.decay.steps": 2,
                      "phases.decay.freeze.embeddings": True, "train.warmup_tokens": 64, "train.weight_decay": 0.1},
    "decay_tokens": {"recipe": "mlm", "phases.main.tokens": 256, "phases.decay.tokens": 128,
                     "phases.decay.shape": "linear", "phases.decay.final_lr_ratio": 0.2},
    "decay_fraction": {"recipe": "clm_detour", "phases.main.tokens": 640, "phases.decay.fraction": 0.3,
                       "phases.main.mlm_probability": 0.2},
}  # fmt: skip


# old mapping form -> the same recipe written as a list (no recorded value needed: both train here)
_DECAY = {"name": "decay", "objective": "mlm", "mlm_probability": 0.15, "shape": "1-sqrt", "final_lr_ratio": 0.1}
LIST_FORMS: dict[str, tuple[dict, list[dict]]] = {
    "clm_detour": ({"recipe": "custom"}, [
        {"name": "main", "objective": "clm", "steps": 3, "shape": "warmup_constant", "warmup_steps": 1},
        {**_DECAY, "steps": 2}]),
    "mlm": ({"recipe": "custom"}, [
        {"name": "main", "objective": "mlm", "mlm_probability": 0.3, "steps": 3, "shape": "warmup_constant",
         "warmup_tokens": 64}, {**_DECAY, "steps": 2}]),
    "warmup_freeze": ({"recipe": "custom", "train.weight_decay": 0.1}, [
        {"name": "warmup", "objective": "mlm", "mlm_probability": 0.3, "steps": 2, "shape": "warmup_constant",
         "warmup_tokens": 64},
        {"name": "main", "objective": "clm", "tokens": 192, "freeze": {"layers": "0-1"}},
        {**_DECAY, "steps": 2, "freeze": {"embeddings": True}}]),
    "decay_fraction": ({"recipe": "custom", "train.total_tokens": 832}, [
        {"name": "main", "objective": "clm", "tokens": 640, "shape": "warmup_constant", "warmup_steps": 1},
        {**_DECAY, "fraction": 192 / 832}]),
}  # fmt: skip


def machine() -> dict:
    """What a recorded checksum depends on besides the code: the CPU (model and ISA flags) and torch."""
    from backend.core.machine import cpu_flags, cpu_name

    flags = hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:12]
    return {"cpu": cpu_name(), "cpu_flags_sha": flags, "torch": torch.__version__}


def _sets(name: str, model_dir: Path, overrides: dict) -> list[str]:
    from backend.core.paths import BUNDLED_TOKENIZER_DIR

    sets = {**BASE, "name": name, "model.name": str(model_dir), **overrides}
    if sets.get("model.tokenizer") == "BUNDLED":
        sets["model.tokenizer"] = str(BUNDLED_TOKENIZER_DIR)
    return [f"{k}={v}" for k, v in sets.items()]


def train_checksums(cfg_source, sets: list[str], root: Path) -> dict[str, str]:
    """Train ``cfg_source`` (+ ``sets``) under ``root`` with one thread; {run name: sha256 of final weights}."""
    from backend.engine.config import load_config
    from backend.runs.train import prepare_runs, train_run

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the reduction order of a matmul may depend on the thread count
    try:
        out = {}
        for run in prepare_runs(load_config(cfg_source, sets), root=root):
            assert train_run(run)["state"] == "done", (run / "train.log").read_text()[-3000:]
            out[run.name] = hashlib.sha256((run / "final" / "model.safetensors").read_bytes()).hexdigest()
        return out
    finally:
        torch.set_num_threads(threads)


def case_checksums(case: str, model_dir: Path, root: Path) -> dict[str, str]:
    return train_checksums(None, _sets(case, model_dir, CASES[case]), root)


@pytest.fixture(scope="module")
def seed0_model(tmp_path_factory) -> Path:
    """The tiny ModernBERT the checksums were recorded from (seed 0)."""
    return save_tiny_model(tmp_path_factory.mktemp("bitwise_model"), TINY_MODERNBERT, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_old_config_trains_the_recorded_weights(case, seed0_model, tmp_path):
    recorded = json.loads(CHECKSUMS.read_text())
    if recorded["machine"] != machine():
        pytest.skip(f"checksums recorded on {recorded['machine']}, this is {machine()}: kernels may differ")
    assert case_checksums(case, seed0_model, tmp_path / "runs") == recorded["cases"][case]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(LIST_FORMS))
def test_list_form_trains_the_same_weights_as_the_old_mapping(case, seed0_model, tmp_path):
    from backend.detour.recipe import build_phases
    from backend.engine.config import load_config

    sets, phases = LIST_FORMS[case]
    old_sets = _sets(case, seed0_model, CASES[case])
    new_sets = _sets(f"{case}-list", seed0_model, sets)
    assert build_phases(load_config({"phases": phases}, new_sets)) == build_phases(load_config(None, old_sets))
    old = train_checksums(None, old_sets, tmp_path / "old")
    new = train_checksums({"phases": phases}, new_sets, tmp_path / "new")
    assert list(old.values()) == list(new.values())


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DETOUR_CACHE_DIR"] = f"{tmp}/cache"
        model = save_tiny_model(Path(tmp) / "model", TINY_MODERNBERT, seed=0)
        cases = {c: case_checksums(c, model, Path(tmp) / "runs") for c in CASES}
    CHECKSUMS.write_text(json.dumps({"machine": machine(), "code": "ca0f178", "cases": cases}, indent=1) + "\n")
    print(CHECKSUMS.read_text())
