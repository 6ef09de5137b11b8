"""A run whose held-out loss ends above a blind guess has diverged: it is failed, never ``done`` without a word.

Before this, ``train.lr=1.0`` ended ``done`` at held-out MLM loss 223 nats, where guessing uniformly over the
vocabulary scores ln(V) (about 9.7 for the bundled 16k vocabulary). The line is ln(V), or the step-0 held-out
loss when that is higher (a model built from scratch starts near ln(V) and a few steps may not bring it under):
a run that ends worse than both a blind guess and its own start has learned nothing usable. Only the end decides
(a spike that recovers is not divergence); the error names the step where the last stretch above the line began.
"""

from __future__ import annotations

import math

from backend.core.errors import DetourError

KEY = "eval_mlm_loss"  # every recipe ends with MLM, and the MLM held-out loss is measured in every run


class DivergedError(DetourError):
    """Training ended with a held-out loss above the blind-guess line; no ``final/`` is written from it."""


class Watch:
    """Follows the held-out MLM loss of every evaluation (``see``) and refuses to call the end ``done`` (``check``)
    when the last one is above the line."""

    def __init__(self, vocab_size: int, rows: list[dict] = (), upto: int = 0):
        self.blind = math.log(max(int(vocab_size), 2))
        self.line, self.above_since, self.last = self.blind, None, None
        for r in rows:  # a resume: what the run measured before its checkpoint
            if r.get("type") == "eval" and r.get("step", 0) <= upto and isinstance(r.get(KEY), (int, float)):
                self.see(r["step"], r)

    def see(self, step: int, ev: dict) -> None:
        loss = float(ev[KEY])
        if step == 0:
            self.line = max(self.blind, loss)
        self.last = (step, loss)
        if loss > self.line:
            self.above_since = self.above_since if self.above_since is not None else (step, loss)
        else:
            self.above_since = None

    def check(self, run_dir) -> None:
        """Raise DivergedError when the last held-out MLM loss is above the line."""
        if self.last is None or self.above_since is None:
            return
        (step, loss), (since, first) = self.last, self.above_since
        start = "" if self.line == self.blind else f" and the step-0 loss {self.line:.2f}"
        raise DivergedError(
            f"run '{run_dir.name}' diverged: held-out MLM loss {loss:.2f} at step {step} is above "
            f"ln(vocabulary) = {self.blind:.2f}, what a blind guess scores{start}; it passed that line at step "
            f"{since} ({first:.2f}) and stayed above; lower train.lr (or raise train.warmup_tokens) and train a new run"
        )
