"""Frozen layers bit-identical; optimizer state carried into the decay, schedule reset."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from backend.engine.rundir import checkpoint_state, list_checkpoints, read_metrics
from backend.runs.train import prepare_runs, train_run
from conftest import tiny_train_cfg


def _weights(d):
    return load_file(str(d / "model.safetensors"))


def _by_tag(run):
    return {checkpoint_state(c).get("tag"): c for c in list_checkpoints(run)}


def test_freeze_low_layers_during_clm_and_mid_layers_during_decay(tiny_modernbert_dir, isolated_runs_dir):
    cfg = tiny_train_cfg(
        tiny_modernbert_dir,
        "frz",
        recipe="clm_detour",
        **{
            "phases.main.freeze.layers": "0-1",
            "phases.decay.freeze.layers": "2",
            "phases.decay.freeze.embeddings": True,
            "train.weight_decay": 0.1,
        },
    )
    (run,) = prepare_runs(cfg)
    assert train_run(run)["state"] == "done"
    w0 = _weights(tiny_modernbert_dir)
    tags = _by_tag(run)
    w_main = _weights(tags["end-main"] / "model")
    w_end = _weights(run / "final")
    low = [k for k in w0 if k.startswith(("model.layers.0.", "model.layers.1."))]
    assert low
    for k in low:  # frozen during CLM: bit-identical after the phase
        assert torch.equal(w0[k], w_main[k]), k
    others = [k for k in w0 if k.startswith(("model.layers.2.", "model.layers.3."))]
    assert all(not torch.equal(w0[k], w_main[k]) for k in others)
    # Layer 2 frozen in the decay, where AdamW momentum and weight decay from phase 1 exist: still exact.
    for k in [k for k in w0 if k.startswith("model.layers.2.") or k.startswith("model.embeddings.")]:
        assert torch.equal(w_main[k], w_end[k]), k
    assert any(not torch.equal(w_main[k], w_end[k]) for k in low)  # unfrozen in the decay: they move again


def test_optimizer_state_is_carried_and_schedule_resets(tiny_modernbert_dir, isolated_runs_dir):
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "opt", recipe="clm_detour"))
    assert train_run(run)["state"] == "done"
    tags = _by_tag(run)
    opt_main = torch.load(tags["end-main"] / "state" / "optimizer.bin", weights_only=True)
    opt_end = torch.load(tags["end-decay"] / "state" / "optimizer.bin", weights_only=True)
    steps_main = {float(s["step"]) for s in opt_main["state"].values()}
    steps_end = {float(s["step"]) for s in opt_end["state"].values()}
    assert steps_main == {8.0} and steps_end == {12.0}  # one AdamW state across both phases
    rows = [r for r in read_metrics(run) if r["type"] == "train"]
    lr = {r["step"]: r["lr"] for r in rows}
    peak = 1e-3
    assert lr[8] == peak  # end of the main phase: constant at peak
    assert lr[9] == peak  # first decay step: back at the peak, no warmup
    assert abs(lr[12] - peak * (0.1 + 0.9 * (1 - (3 / 4) ** 0.5))) < 1e-12
    phases = [r for r in read_metrics(run) if r["type"] == "phase"]
    assert [(p["phase"], p["objective"], p["step"]) for p in phases] == [("main", "clm", 0), ("decay", "mlm", 8)]


def test_cpu_optimizer_takes_the_foreach_path_with_the_loop_path_weights(tiny_modernbert_dir):
    """On CPU torch's default AdamW loops over tensors in Python; build_optimizer asks for foreach (fewer, larger
    operations): the weights after some steps, frozen tensors skipped, must be those of the loop, bit for bit."""
    from backend.detour.recipe import build_optimizer
    from backend.engine.config import load_config
    from backend.engine.models import load_masked_lm

    train_cfg = load_config(None)["train"] | {"lr": 1e-3, "weight_decay": 0.1}
    results = []
    for foreach in (True, False):
        torch.manual_seed(0)
        model = load_masked_lm(str(tiny_modernbert_dir))
        opt = build_optimizer(model, train_cfg)
        assert opt.defaults["foreach"] is (True if not torch.cuda.is_available() else None)
        if not foreach:
            for g in opt.param_groups:
                g["foreach"] = False
        ids = torch.randint(5, 200, (2, 32), generator=torch.Generator().manual_seed(1))
        for step in range(4):
            model(input_ids=ids, labels=ids).loss.backward()
            model.model.embeddings.tok_embeddings.weight.grad = None  # a frozen tensor: no update at all
            for g in opt.param_groups:
                g["lr"] = 1e-3 * (1 - step / 8)
            opt.step()
            opt.zero_grad(set_to_none=True)
        results.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    if not torch.cuda.is_available():  # bf16 runs on a CPU take the fused kernel (not bit-identical: not for fp32)
        bf16 = build_optimizer(model, train_cfg | {"precision": "bf16"})
        assert bf16.defaults["fused"] is True and not bf16.defaults["foreach"]
    assert results[0].keys() == results[1].keys()
    for k, v in results[0].items():
        assert torch.equal(v, results[1][k]), k
