"""The recipe: which phases run, with what objective, attention, masking, LR and frozen parameters.

**A recipe is a timeline: an ordered list of phases.** Each phase has an objective (one module of ``objectives/``
each: its attention, labels and settings), a budget (``tokens``, ``steps`` or ``fraction`` of
``train.total_tokens``), an LR shape (``warmup_constant`` | ``constant`` | ``1-sqrt`` | ``linear``) and what it keeps
frozen. ``phases`` may be written as that list (``recipe: custom``); the named presets expand to one (``timeline``).
A preset is data, one YAML file in ``presets/`` (which shape of timeline, filled with which objectives; read its
file for what it trains); the shapes are here:

``detour``:   [warmup] -> main -> decay, from the ``phases`` mapping (``clm_detour``, ``mlm``, ``pretrain``); the
              decay takes ``decay.fraction`` of main's tokens, 1-sqrt to 10%.
``pair``:     two presets with the same seed, data order and budgets (two runs); with a list, the list and its
              baseline, each phase of another objective replaced by the baseline's at ``pair.mlm_probability``.
``split``:    one objective for ``hybrid.clm_share`` of ``hybrid.tokens``, then another (the seed paper's splits).
``schedule``: one objective at each of ``mask_schedule.rates`` in turn (mmBERT: 30% -> 15% -> 5%).
``blocks``:   blocks of objectives in turn, by share of ``alternate.tokens`` (AntLM: CLM 4 / MLM 16 / CLM 4).
``single``:   one objective and its decay, its settings from the preset's section (``mixed``: GPT-BERT).

What each objective is (its attention, labels, settings, held-out loss, how it is drawn) is declared in its own module
of ``objectives/``; this file only says which phases run and names none.

**One optimizer spans all phases.** AdamW is built once (``build_optimizer``) and its state (moments,
step counts) is carried from phase to phase untouched. A phase change changes only three things: the
attention mode (``Phase.causal``), the objective, and the LR, which is a pure function of the step
*within* the phase (``Phase.lr_factor``). So the decay "resets the schedule" because its step counter
starts at 0, not because any scheduler object is rebuilt (nothing to mis-step under Accelerate, which
steps an ``AcceleratedScheduler`` once per process and skips non-update steps).

**Frozen means bit-identical.** Zeroing a frozen parameter's gradient is not enough once optimizer state
exists (AdamW's momentum and weight decay still move it), so the trainer drops its gradient entirely
(``p.grad = None``) after backward: torch's AdamW skips such parameters (no update, no decay, no state
change). Gradients are still computed, since DDP needs a fixed set of parameters that require grad.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from backend import objectives, presets
from backend.core.errors import ConfigError
from backend.engine.config import default_phase_name, parse_layer_range
from backend.engine.models import parameter_groups


@dataclass(frozen=True)
class Phase:
    name: str  # warmup | main | decay (presets), or the list's names
    objective: str  # a name in ``objectives`` (one module each)
    mlm_probability: float | None  # masking rate (phases whose objective masks)
    steps: int  # optimizer steps
    schedule: str  # warmup_constant | constant | 1-sqrt | linear
    warmup_steps: int = 0  # linear LR warm-up at the start of this phase (warmup_constant only)
    final_lr_ratio: float = 0.1  # where 1-sqrt / linear end, as a fraction of the peak
    freeze_layers: tuple[int, ...] = ()  # transformer blocks left untouched in this phase
    freeze_embeddings: bool = False
    freeze_head: bool = False  # everything above the blocks: final norm, prediction head, decoder bias
    options: tuple[tuple[str, float], ...] = ()  # the objective's settings, defaults filled in

    @property
    def spec(self) -> objectives.Objective:
        """What the objective declares (``backend/objectives/``)."""
        return objectives.get(self.objective)

    @property
    def settings(self) -> dict:
        return dict(self.options)

    @property
    def attention(self) -> str:
        return self.spec.attention

    @property
    def causal(self) -> bool:
        """Whether the phase needs more than bidirectional attention (the architecture must support it)."""
        return self.attention != "bidirectional"

    def lr_factor(self, step: int) -> float:
        """Multiplier of the peak LR at ``step`` (0-based) within this phase."""
        if self.schedule in ("warmup_constant", "constant"):
            if self.warmup_steps > 0 and step < self.warmup_steps:
                return (step + 1) / self.warmup_steps
            return 1.0
        t = min(step / max(self.steps, 1), 1.0)
        a = self.final_lr_ratio
        if self.schedule == "1-sqrt":
            return a + (1 - a) * (1 - math.sqrt(t))
        if self.schedule == "linear":
            return a + (1 - a) * (1 - t)
        raise ValueError(self.schedule)

    def frozen_names(self, hf_model: nn.Module) -> set[str]:
        """Names of the parameters this phase keeps fixed."""
        groups = parameter_groups(hf_model)
        names = {n for i in self.freeze_layers for n in groups.get(f"layer.{i}", [])}
        if self.freeze_embeddings:
            names.update(groups.get("embeddings", []))
        if self.freeze_head:
            names.update(groups.get("head", []))
        return names


def tokens_per_step(cfg: dict, world_size: int = 1) -> int:
    t = cfg["train"]
    return t["batch_size"] * t["grad_accum"] * world_size * t["seq_len"]


def _steps(p: dict, tps: int, default_tokens: int | None = None) -> int:
    if p.get("steps"):
        return int(p["steps"])
    tokens = p.get("tokens") or default_tokens or 0
    return math.ceil(tokens / tps) if tokens else 0


def _freeze(fr: dict | None) -> dict:
    fr = fr or {}
    return {"layers": fr.get("layers"), "embeddings": bool(fr.get("embeddings")), "head": bool(fr.get("head"))}


def _lr_warmup(cfg: dict, tps: int, default_steps: int) -> int:
    """LR warm-up steps: ``train.warmup_tokens``, else 10% of ``default_steps`` (at least one)."""
    wt = cfg["train"]["warmup_tokens"]
    return math.ceil(wt / tps) if wt is not None else max(1, round(0.1 * default_steps))


def _phase(
    name: str,
    objective: str,
    steps: int,
    settings: dict | None = None,
    shape: str = "constant",
    warmup_steps: int = 0,
    final_lr_ratio: float = 0.1,
    freeze: dict | None = None,
    key: str = "",
) -> dict:
    """One resolved phase as plain data (budget in steps); ``key`` is where its settings come from, for errors.
    A warm-up of no steps is the constant shape (one name for one LR curve). The objective's settings (defaults
    filled in) are under ``settings`` and, as in a phase list, each at the top level (None where it has none)."""
    shape = "constant" if shape == "warmup_constant" and not warmup_steps else shape
    spec = objectives.get(objective)
    given = {k: v for k, v in (settings or {}).items() if v is not None}
    own = {s.name: given.get(s.name, s.default) for s in spec.settings}
    return {"name": name, "objective": objective, **dict.fromkeys(objectives.setting_names()), **own,
            "settings": own, "steps": steps, "shape": shape, "warmup_steps": warmup_steps,
            "final_lr_ratio": final_lr_ratio, "freeze": _freeze(freeze), "key": key}  # fmt: skip


def _detour_preset(cfg: dict, tps: int) -> list[dict]:
    """clm_detour / mlm / pretrain: [warmup] -> main -> decay, from the ``phases`` mapping; the objective of each is
    the preset's (``presets/<recipe>.yaml``): where the detour and its baseline differ."""
    ph, objective = cfg["phases"], presets.get(cfg["recipe"])["objectives"]
    warm_steps, main_steps = _steps(ph["warmup"], tps), _steps(ph["main"], tps)
    lr_warmup = min(_lr_warmup(cfg, tps, main_steps), warm_steps or main_steps)  # in the first phase only
    out = []
    if warm_steps:
        out.append(_phase("warmup", objective["warmup"], warm_steps, ph["warmup"], "warmup_constant", lr_warmup,
                          key="phases.warmup"))  # fmt: skip
    out.append(_phase("main", objective["main"], main_steps, ph["main"], "warmup_constant",
                      0 if warm_steps else lr_warmup, freeze=ph["main"]["freeze"], key="phases.main"))  # fmt: skip
    d = ph["decay"]
    decay_steps = _steps(d, tps, default_tokens=round(d["fraction"] * main_steps * tps))
    if decay_steps:  # no warm-up: from the peak straight down to final_lr_ratio of it
        out.append(_phase("decay", objective["decay"], decay_steps, d, d["shape"],
                          final_lr_ratio=d["final_lr_ratio"], freeze=d["freeze"], key="phases.decay"))  # fmt: skip
    return out


def _every_part_holds_a_step(parts: list[dict], budgets: list[float], tps: int, key: str, value, how: str) -> None:
    """The phase list's rule for presets too (``budget.check_step_fits``): a part given a share of the budget must
    hold one optimizer step. Rounding it to no step left it out (``alternate.tokens=100`` trained one MLM block and
    no CLM), rounding it up to one stretched it; either is refused here, naming the part and its budget."""
    for part, budget in zip(parts, budgets, strict=True):
        if budget > 0 and (budget < tps or not part["steps"]):
            budget = f"{budget:,.0f}" if budget >= 1 else f"{budget:.2g}"
            raise ConfigError(
                key,
                value,
                f"phase '{part['name']}' gets {budget} tokens ({how}), less than one optimizer step of {tps:,} "
                "tokens (train.batch_size x seq_len x grad_accum x processes): it would be dropped or stretched; "
                f"raise {key.split('.')[0]}.tokens, give it a larger share, or lower the step",
            )


def _hybrid_preset(cfg: dict, tps: int) -> list[dict]:
    """CLM for ``clm_share`` of the budget, then MLM: the objective splits of Gisserot-Boukhlef et al. (2025),
    "Should We Still Pretrain Encoders with Masked Language Modeling?" (arXiv 2507.00994; the blog in
    ``../shared/papers/``): 100% MLM, 25/75, 50/50, 75/25 and 100% CLM at fixed budgets, CLM first.

    The MLM part masks ``hybrid.mlm_probability`` = 40%, the rate the seed paper states ("a 22,000-step CPT ...
    using a 40% masking ratio"). The blog gives no LR schedule, so every split gets the same one: a linear
    warm-up over the run's first ``train.warmup_tokens`` (default 10% of the budget), then constant, and
    optionally a 1-sqrt decay to 10% over the last ``hybrid.decay_fraction``. The split moves only where the
    objective (and the attention) changes; a zero-length part (share 0 or 1) is left out."""
    h = cfg["hybrid"]
    first, then = presets.get(cfg["recipe"])["objectives"]  # the phases are named for their objectives
    total = math.ceil(h["tokens"] / tps)
    share = round(h["clm_share"] * total)
    parts = [
        _phase(first, first, share, key="hybrid.clm_share"),
        _phase(then, then, total - share, h, key="hybrid.clm_share"),
    ]
    budgets = [h["clm_share"] * h["tokens"], (1 - h["clm_share"]) * h["tokens"]]
    how = f"hybrid.clm_share {h['clm_share']:g} of hybrid.tokens {h['tokens']:,}"
    _every_part_holds_a_step(parts, budgets, tps, "hybrid.tokens", h["tokens"], how)
    parts = [p for p in parts if p["steps"]]
    decay = round(h["decay_fraction"] * total)
    if decay:
        last = parts[-1]
        if decay > last["steps"]:
            raise ConfigError("hybrid.decay_fraction", h["decay_fraction"],
                              f"the decay ({decay} steps) is longer than the {last['objective'].upper()} part "
                              f"({last['steps']} steps): it would change objective mid-decay")  # fmt: skip
        last["steps"] -= decay
        parts.append(_phase("decay", last["objective"], decay, last["settings"], "1-sqrt",
                            key="hybrid.decay_fraction"))  # fmt: skip
        parts = [p for p in parts if p["steps"]]
    warm = _lr_warmup(cfg, tps, total)
    first = parts[0]
    if warm > first["steps"] or first["shape"] != "constant":
        raise ConfigError("hybrid.clm_share", h["clm_share"],
                          f"the first phase ({first['name']}, {first['steps']} steps) is shorter than the LR warm-up "
                          f"({warm} steps): every split shares one LR shape; lower train.warmup_tokens")  # fmt: skip
    first.update(shape="warmup_constant" if warm else "constant", warmup_steps=warm)
    return parts


def _mask_schedule_preset(cfg: dict, tps: int) -> list[dict]:
    """MLM at each rate in turn, one optimizer throughout, e.g. mmBERT's 30% -> 15% -> 5% (arXiv 2509.06888):
    the budget split by ``shares`` (equal by default), an LR warm-up in the first phase, and the last phase
    decaying (``decay_shape``) when there are several. A rate whose share rounds to no step is left out."""
    m = cfg["mask_schedule"]
    rates = m["rates"]
    shares = m["shares"] or [1 / len(rates)] * len(rates)
    total = math.ceil(m["tokens"] / tps)
    bounds = [round(sum(shares[: i + 1]) * total) for i in range(len(rates))]
    steps = [b - a for a, b in zip([0, *bounds[:-1]], bounds, strict=True)]
    names = [f"mask{r * 100:g}".replace(".", "_") for r in rates]
    names = [n if names.count(n) == 1 else f"{n}-{i + 1}" for i, n in enumerate(names)]
    objective = presets.get(cfg["recipe"])["objective"]
    parts = [_phase(n, objective, s, {"mlm_probability": r}, key="mask_schedule.rates")
             for n, s, r in zip(names, steps, rates, strict=True)]  # fmt: skip
    how = f"its share of mask_schedule.tokens {m['tokens']:,}"
    budgets = [sh / sum(shares) * m["tokens"] for sh in shares]
    _every_part_holds_a_step(parts, budgets, tps, "mask_schedule.tokens", m["tokens"], how)
    parts = [p for p in parts if p["steps"]]
    if len(parts) > 1 and m["decay_shape"] != "constant":
        parts[-1]["shape"] = m["decay_shape"]
    warm = min(_lr_warmup(cfg, tps, total), parts[0]["steps"])
    parts[0].update(shape="warmup_constant" if warm else "constant", warmup_steps=warm)
    return parts


def alternate_blocks(text: str) -> list[tuple[str, float]]:
    """``"clm:4, mlm:16, clm:4"`` -> [(objective, weight), ...]; ``config.validate_config`` has checked it."""
    out = []
    for part in text.split(","):
        name, _, weight = part.strip().partition(":")
        out.append((name.strip(), float(weight)))
    return out


def _alternate_preset(cfg: dict, tps: int) -> list[dict]:
    """Blocks of objectives in turn, one optimizer throughout: AntLM (Yu et al. 2024) alternates CLM and MLM by
    epochs, e.g. CLM 4 / MLM 16 / CLM 4. ``alternate.blocks`` gives each block's objective and weight, the budget
    ``alternate.tokens`` is split in proportion; masking objectives mask at ``alternate.mlm_probability``. An LR
    warm-up in the first block, the last block decaying (``decay_shape``) when there are several."""
    a = cfg["alternate"]
    blocks = alternate_blocks(a["blocks"])
    total = math.ceil(a["tokens"] / tps)
    weight = sum(w for _, w in blocks)
    bounds = [round(sum(w for _, w in blocks[: i + 1]) / weight * total) for i in range(len(blocks))]
    steps = [b - a_ for a_, b in zip([0, *bounds[:-1]], bounds, strict=True)]
    parts = [_phase(f"b{i + 1}-{name}", name, n, {"mlm_probability": a["mlm_probability"]}, key="alternate.blocks")
             for i, ((name, _), n) in enumerate(zip(blocks, steps, strict=True))]  # fmt: skip
    how = f"its weight in alternate.blocks '{a['blocks']}' of alternate.tokens {a['tokens']:,}"
    budgets = [w / weight * a["tokens"] for _, w in blocks]
    _every_part_holds_a_step(parts, budgets, tps, "alternate.tokens", a["tokens"], how)
    parts = [p for p in parts if p["steps"]]
    if not parts:
        raise ConfigError("alternate.tokens", a["tokens"], "the budget rounds to no step: raise it")
    if len(parts) > 1 and a["decay_shape"] != "constant":
        parts[-1]["shape"] = a["decay_shape"]
    warm = min(_lr_warmup(cfg, tps, total), parts[0]["steps"])
    parts[0].update(shape="warmup_constant" if warm else "constant", warmup_steps=warm)
    return parts


def _single_preset(cfg: dict, tps: int) -> list[dict]:
    """One objective (the preset's), then its 1-sqrt decay over the last ``<recipe>.decay_fraction``, its settings from
    the ``<recipe>`` section: e.g. GPT-BERT (Charpentier & Samuel 2024), mixed batches, ``mixed.causal_share`` of the
    rows causal (about 1 to 15 in the paper) and the rest masked at ``mixed.mlm_probability``; an LR warm-up, then
    constant."""
    recipe = cfg["recipe"]
    m, objective = cfg[recipe], presets.get(recipe)["objective"]
    total = math.ceil(m["tokens"] / tps)
    decay = round(m["decay_fraction"] * total)
    settings = {s.name: m[s.name] for s in objectives.get(objective).settings if s.name in m}
    parts = [_phase(objective, objective, total - decay, settings, key=f"{recipe}.tokens"),
             _phase("decay", objective, decay, settings, "1-sqrt", key=f"{recipe}.decay_fraction")]  # fmt: skip
    parts = [p for p in parts if p["steps"]]
    warm = min(_lr_warmup(cfg, tps, total), parts[0]["steps"])
    if parts[0]["shape"] == "constant":
        parts[0].update(shape="warmup_constant" if warm else "constant", warmup_steps=warm)
    return parts


def _listed(cfg: dict, tps: int) -> list[dict]:
    """A ``phases`` list resolved: budgets in steps, defaults filled in (``check_phase_list`` has run)."""
    total = cfg["train"]["total_tokens"]
    out = []
    for i, p in enumerate(cfg["phases"]):
        if p.get("steps") is not None:
            steps = int(p["steps"])
        else:
            tokens = p["tokens"] if p.get("tokens") is not None else round(p["fraction"] * total)
            steps = math.ceil(tokens / tps)
        if steps <= 0:
            raise ConfigError(f"phases[{i}]", p, "an empty phase (its budget rounds to no step)")
        if p.get("warmup_steps") is not None:
            warm = p["warmup_steps"]
        else:
            warm = math.ceil(p["warmup_tokens"] / tps) if p.get("warmup_tokens") else 0
        shape = p.get("shape", "constant")
        fr = p.get("final_lr_ratio")
        out.append(_phase(p.get("name") or default_phase_name(i, p["objective"]), p["objective"], steps,
                          p, shape, min(warm, steps), 0.1 if fr is None else fr,
                          p.get("freeze"), key=f"phases[{i}]"))  # fmt: skip
    return out


SHAPES = {"detour": _detour_preset, "split": _hybrid_preset, "schedule": _mask_schedule_preset,
          "blocks": _alternate_preset, "single": _single_preset}  # fmt: skip


def timeline(cfg: dict, world_size: int = 1) -> list[dict]:
    """The phases of a validated single-run config as plain data (budgets in steps): the written list, or the
    named preset's expansion. A pair is two runs: split it first (``split_pair``)."""
    tps = tokens_per_step(cfg, world_size)
    if isinstance(cfg["phases"], list):
        return _listed(cfg, tps)
    shape = presets.get(cfg["recipe"])["shape"]
    assert shape in SHAPES, "pair is split into two runs before training"
    return SHAPES[shape](cfg, tps)


def build_phases(cfg: dict, world_size: int = 1, num_layers: int | None = None) -> list[Phase]:
    """The recipe's phases for a validated single-run config (``num_layers`` range-checks the freeze sets)."""
    phases = []
    for d in timeline(cfg, world_size):
        fr = d["freeze"]
        layers = parse_layer_range(fr["layers"], f"{d['key']}.freeze.layers", num_layers)
        phases.append(Phase(d["name"], d["objective"], d["settings"].get("mlm_probability"), d["steps"], d["shape"],
                            d["warmup_steps"], d["final_lr_ratio"], tuple(layers), fr["embeddings"], fr["head"],
                            tuple(d["settings"].items())))  # fmt: skip
    return phases


def expand_phases(cfg: dict, world_size: int = 1, lr_points: int = 40) -> list[dict]:
    """The resolved timeline as plain data, for drawing and for other tools: per phase its name, objective,
    attention, mask rate, steps and tokens (start, end), LR shape, frozen blocks, and ``lr`` as [tokens, factor of
    the peak] points. A pair gives its detour run's timeline (``split_pair`` for both)."""
    cfg = split_pair(cfg)[0][1]
    tps = tokens_per_step(cfg, world_size)
    out, start = [], 0
    for d, p in zip(timeline(cfg, world_size), build_phases(cfg, world_size), strict=True):
        at = sorted({0, *range(0, p.steps, max(1, p.steps // lr_points)), p.warmup_steps, p.steps - 1} - {-1})
        at = [s for s in at if s < p.steps]
        lr = [[(start + s) * tps, p.lr_factor(s)] for s in at] + [[(start + p.steps) * tps, p.lr_factor(p.steps)]]
        out.append({**{k: v for k, v in d.items() if k != "key"}, "causal": p.causal, "attention": p.attention,
                    "label": p.spec.text(p.settings),
                    "freeze": {**d["freeze"], "layers": list(p.freeze_layers)},
                    "start_step": start, "end_step": start + p.steps, "tokens": p.steps * tps,
                    "start_tokens": start * tps, "end_tokens": (start + p.steps) * tps, "lr": lr})  # fmt: skip
        start += p.steps
    return out


def locate(phases: list[Phase], global_step: int) -> tuple[int, int]:
    """(phase index, step within phase) of a 0-based global optimizer step."""
    s = global_step
    for i, p in enumerate(phases):
        if s < p.steps:
            return i, s
        s -= p.steps
    return len(phases) - 1, phases[-1].steps


def split_pair(cfg: dict) -> list[tuple[str | None, dict]]:
    """A pair config -> [(role, cfg)] named '<name>-detour' and '<name>-mlm'; anything else -> [(None, cfg)].

    With ``phases`` as a list, the detour run trains the list and the baseline the same list with each CLM phase
    replaced by MLM at ``pair.mlm_probability``: same budgets, LR shapes and frozen sets (``recipe: custom``)."""
    if cfg["recipe"] == presets.CUSTOM or presets.get(cfg["recipe"])["shape"] != "pair":
        return [(None, cfg)]
    pair = presets.get(cfg["recipe"])
    listed = isinstance(cfg["phases"], list)
    out = []
    for i, (role, recipe) in enumerate(pair["runs"].items()):  # the detour run first, then its baseline
        c = copy.deepcopy(cfg)
        c["recipe"], c["name"] = (presets.CUSTOM if listed else recipe), f"{cfg['name']}-{role}"
        if listed and i:
            rate, base = cfg["pair"]["mlm_probability"], pair["baseline"]
            c["phases"] = [p if p["objective"] == base else _as_baseline(p, base, rate) for p in c["phases"]]
        c["_meta"] = {**c.get("_meta", {}), "pair": cfg["name"], "role": role}
        out.append((role, c))
    return out


def _as_baseline(p: dict, objective: str, rate: float) -> dict:
    """A listed phase turned into the pair's baseline: ``objective`` masking at ``rate``, the other objective's
    settings dropped."""
    other = set(objectives.setting_names())
    return {**{k: v for k, v in p.items() if k not in other}, "objective": objective, "mlm_probability": rate}


def first_causal_phase(cfg: dict) -> str | None:
    """The name of the first phase that needs more than bidirectional attention, of any run ``cfg`` trains (a pair:
    both), else None."""
    return next((p.name for _, c in split_pair(cfg) for p in build_phases(c) if p.causal), None)


def drop_frozen_grads(params: list[nn.Parameter]) -> None:
    """After backward, before clipping and stepping: AdamW skips a parameter whose grad is None."""
    for p in params:
        p.grad = None


# --- the one optimizer ------------------------------------------------------------------------------------


def no_decay(name: str, param: nn.Parameter) -> bool:
    lname = name.lower()
    return param.ndim < 2 or lname.endswith(".bias") or "norm" in lname


def build_optimizer(hf_model: nn.Module, train_cfg: dict) -> torch.optim.AdamW:
    """AdamW, decoupled weight decay, none on biases and norms; built once, used by every phase.

    The paper used Composer's DecoupledAdamW, whose weight decay is *not* multiplied by the LR: each step
    shrinks weights by ``wd * lr / peak_lr``. torch's AdamW shrinks by ``lr * weight_decay``, so we pass
    ``weight_decay = wd / peak_lr``: the same decay, following the schedule.

    On CUDA the fused kernel updates every tensor in one launch (what the HF Trainer's ``adamw_torch_fused`` does);
    like the others it skips a parameter whose grad is None, so frozen parameters stay bit-identical. Not under
    FSDP (sharded DTensor parameters). On CPU, fused AdamW (half the time of foreach for the bundled model) rounds
    differently from the per-tensor loop, so it is taken only for bf16 runs; fp32 runs take the foreach path
    (torch's default picks it only for CUDA tensors): all tensors per operation instead of one loop of Python per
    tensor, with bit-identical weights to the loop (the same operations in the same order; tested).
    """
    decay, plain = [], []
    for name, p in hf_model.named_parameters():
        (plain if no_decay(name, p) else decay).append(p)
    peak = float(train_cfg["lr"])
    fused = not train_cfg.get("fsdp") and (torch.cuda.is_available() or train_cfg.get("precision") == "bf16")
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": float(train_cfg["weight_decay"]) / peak, "group": "decay"},
            {"params": plain, "weight_decay": 0.0, "group": "no_decay"},
        ],
        lr=peak,
        betas=tuple(train_cfg["betas"]),
        eps=float(train_cfg["eps"]),
        fused=True if fused else None,
        foreach=None if fused or torch.cuda.is_available() or train_cfg.get("fsdp") else True,
    )


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for g in optimizer.param_groups:
        g["lr"] = lr
