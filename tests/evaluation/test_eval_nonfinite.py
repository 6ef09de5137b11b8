"""Non-finite steps are skipped, counted and reported (progress events, metrics.json, results.json/md), never hidden;
too many fail the seed with a clear error. The evaluation speaks ``train.precision``'s vocabulary and still resumes
folders whose metrics.json recorded the old ``mixed_precision``."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from backend.__main__ import main as cli
from backend.core.errors import ConfigError
from backend.core.paths import DEMO_NER_DIR
from backend.engine.precision import make_accelerator
from backend.evaluation import runner as runner_mod
from backend.evaluation.finetune import MIN_SKIP_BUDGET, train_step
from backend.evaluation.runner import evaluate_models

# 48 demo sentences in batches of 8: 6 steps per epoch on a tiny random ModernBERT
HP = dict(epochs=1, lr=1e-3, batch_size=8, max_len=64, max_train_examples=48, max_eval_examples=16)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Poisoned:
    """A task whose models go non-finite at chosen training steps (1-based): the gradient of the classifier
    (``grad_steps``) or the logits, hence the loss (``loss_steps``). Everything else is the real task."""

    def __init__(self, task, grad_steps=(), loss_steps=(), value=math.nan):
        self.task, self.grad_steps, self.loss_steps, self.value = task, set(grad_steps), set(loss_steps), value

    def __getattr__(self, name):
        return getattr(self.task, name)

    def load_model(self, source, **kw):
        model = self.task.load_model(source, **kw)
        calls = {"forward": 0, "backward": 0}

        def on_grad(g):
            calls["backward"] += 1
            return g * self.value if calls["backward"] in self.grad_steps else g

        def on_logits(module, args, out):
            if module.training:
                calls["forward"] += 1
                return out * self.value if calls["forward"] in self.loss_steps else out
            return out

        model.classifier.weight.register_hook(on_grad)
        model.classifier.register_forward_hook(on_logits)
        return model


def poison_runs(monkeypatch, **poison):
    build = runner_mod._build_task
    monkeypatch.setattr(runner_mod, "_build_task", lambda *a, **kw: Poisoned(build(*a, **kw), **poison))


def test_skipped_steps_are_counted_and_reported_everywhere(tmp_path, tiny_modernbert_dir, monkeypatch):
    poison_runs(monkeypatch, grad_steps={2}, loss_steps={4})
    events = []
    kw = dict(precision="fp32", progress=events.append, labels=["tiny"])
    res = evaluate_models([str(tiny_modernbert_dir)], "ner", DEMO_NER_DIR, [0], tmp_path, **kw, **HP)
    assert res["status"] == "complete"
    run = res["models"][0]["runs"][0]
    assert run["status"] == "ok" and run["skipped_steps"] == 2
    m = json.loads((tmp_path / "models" / "tiny" / "seed-0" / "metrics.json").read_text())
    skipped = m["skipped_steps"]
    counts = [skipped[k] for k in ("total", "nonfinite_grad", "nonfinite_loss", "fp16_overflow")]
    assert counts == [2, 1, 1, 0]
    assert [(f["step"], f["reason"], f["value"]) for f in skipped["first"]] == [
        (2, "nonfinite_grad", "nan"),
        (4, "nonfinite_loss", "nan"),
    ]
    assert skipped["budget"] == MIN_SKIP_BUDGET and m["optimizer_steps"] == 6 - 2
    assert m["history"][0]["skipped_steps"] == 2 and math.isfinite(m["history"][0]["train_loss"])
    weights = load_file(tmp_path / "models" / "tiny" / "seed-0" / "model.safetensors")
    assert all(torch.isfinite(w).all() for w in weights.values())  # a skipped step never reached the weights
    step_events = [e for e in events if e["event"] == "step"]
    seen = {(e["step"], e["skipped"]) for e in step_events}
    assert {(2, 1), (4, 2)} <= seen  # each skip is reported at once
    epoch_event = [e for e in events if e["event"] == "epoch"][0]
    assert epoch_event["skipped"] == 2 and "2 steps skipped (non-finite loss or gradients)" in epoch_event["message"]
    md = (tmp_path / "results.md").read_text()
    assert "## Skipped steps" in md and "seed 0: 2 steps skipped" in md


def test_too_many_skipped_steps_fail_the_seed_with_a_clear_error(tmp_path, tiny_modernbert_dir, monkeypatch):
    poison_runs(monkeypatch, grad_steps=set(range(1, 100)))
    hp = {**HP, "epochs": 2, "batch_size": 4}  # 24 steps: the budget is the minimum, 10
    model = [str(tiny_modernbert_dir)]
    res = evaluate_models(model, "ner", DEMO_NER_DIR, [0], tmp_path, precision="fp32", labels=["tiny"], **hp)
    assert res["status"] == "complete_with_failures"
    err = res["failures"][0]["error"]
    assert err.startswith("NonFiniteTraining: 11 steps skipped for non-finite values (loss 0, gradients 11")
    assert "more than the 10 allowed (5% of 24 steps, at least 10)" in err
    assert "the first at epoch 1 step 1 (nonfinite_grad nan, batch length" in err
    assert not (tmp_path / "models" / "tiny" / "seed-0" / "metrics.json").exists()


def _prepared(tiny_modernbert_dir, accelerator):
    from backend.engine.models import resolve_model
    from backend.evaluation.finetune import resolve_hparams
    from backend.evaluation.ner import pad_batch
    from backend.evaluation.runner import _build_task, _subsample_data, load_task_data

    hp = resolve_hparams("ner", **HP)
    data = _subsample_data(load_task_data("ner", DEMO_NER_DIR), 8, 4)
    source = resolve_model(str(tiny_modernbert_dir))
    task = _build_task("ner", data, source, "tiny", hp, False)
    torch.manual_seed(0)
    model = task.load_model(source)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / 10)
    model, opt, sched = accelerator.prepare(model, opt, sched)
    batch = pad_batch(task.train_features[:8], task.pad_id)
    return model, opt, sched, batch


def test_a_nonfinite_gradient_leaves_weights_optimizer_and_schedule_untouched(tiny_modernbert_dir):
    acc = make_accelerator("fp32")
    model, opt, sched, batch = _prepared(tiny_modernbert_dir, acc)
    assert train_step(acc, model, opt, sched, batch, 1.0)[1] is None
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    state = {k: {n: v.clone() for n, v in s.items()} for k, s in opt.state.items()}
    lr = sched.get_last_lr()
    handle = model.classifier.weight.register_hook(lambda g: g * math.inf)
    loss, reason, value = train_step(acc, model, opt, sched, batch, 1.0)
    handle.remove()
    assert math.isfinite(loss) and reason == "nonfinite_grad" and not math.isfinite(value)
    assert all(torch.equal(p, weights[n]) for n, p in model.named_parameters())
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(opt.state[k][n], v) for k, s in state.items() for n, v in s.items())
    assert sched.get_last_lr() == lr
    assert train_step(acc, model, opt, sched, batch, 0.0)[1] is None  # clipping off: the norm is still checked
    assert int(next(iter(opt.state.values()))["step"]) == 2


def test_fp16_gradscaler_skips_are_counted(tiny_modernbert_dir):
    """Under fp16 the GradScaler must see the overflow (it lowers its scale); the loop counts what it skipped.
    Accelerate makes no scaler on a CPU, so a real CPU GradScaler is given to the accelerator here."""
    acc = make_accelerator("fp32")
    acc.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    model, opt, sched, batch = _prepared(tiny_modernbert_dir, acc)
    assert train_step(acc, model, opt, sched, batch, 1.0)[1] is None
    handle = model.classifier.weight.register_hook(lambda g: g * math.inf)
    assert train_step(acc, model, opt, sched, batch, 1.0)[1] == "fp16_overflow"
    handle.remove()
    assert acc.scaler.get_scale() == 2.0**9
    assert train_step(acc, model, opt, sched, batch, 1.0)[1] is None


def test_precision_vocabulary_and_resume_from_mixed_precision(tmp_path, tiny_modernbert_dir, capsys):
    args = ([str(tiny_modernbert_dir)], "ner", str(DEMO_NER_DIR), [0], tmp_path)
    res = evaluate_models(*args, precision="fp32", labels=["tiny"], **HP)
    assert res["precision"] == {"requested": "fp32", "resolved": "fp32", "why": "asked for explicitly"}
    metrics_path = tmp_path / "models" / "tiny" / "seed-0" / "metrics.json"
    m = json.loads(metrics_path.read_text())
    assert m["precision"] == res["precision"] and "mixed_precision" not in m
    assert "Precision: fp32 (asked: fp32; asked for explicitly)." in (tmp_path / "results.md").read_text()

    # a folder finished by the older version: metrics.json had Accelerate's mixed_precision; it still resumes
    del m["precision"], m["skipped_steps"], m["optimizer_steps"]
    m["mixed_precision"] = "no"
    metrics_path.write_text(json.dumps(m))
    res = evaluate_models(*args, precision="fp32", labels=["tiny"], **HP)
    run = res["models"][0]["runs"][0]
    assert run["resumed"] and run["precision"]["resolved"] == "fp32" and run["skipped_steps"] == 0

    with pytest.raises(ConfigError, match=r"'precision': got 'no'; use one of: auto, fp32, bf16, fp16"):
        evaluate_models(*args, precision="no", **HP)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="fp16 needs a CUDA GPU"):
            evaluate_models(*args, precision="fp16", **HP)
    base = ["evaluate", "--models", str(tiny_modernbert_dir), "--out", str(tmp_path / "cli")]
    assert cli([*base, "--mixed-precision", "no"]) == 2
    assert "renamed --precision: auto | fp32 | bf16 | fp16 (no is fp32)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli([*base, "--precision", "half"])
    assert "invalid choice: 'half'" in capsys.readouterr().err
