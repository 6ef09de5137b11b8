"""The experiment config, key by key: one table from which the defaults, the type and range checks (and their
messages), ``python -m backend validate --print`` and the app's Launch form all come.

Each ``Key`` names its dotted path, default, kind, allowed range or choices, a one-line help, and, when the
Launch form shows it, its label and place there (``form``: order; ``advanced``: in the folded section).
Checks that involve several keys (a from-scratch model needs a tokenizer, ...) live in ``config.validate_config``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import backend.presets as presets
from backend.core.paths import DEFAULT_MODEL
from backend.engine.trackers import TRACKERS

MAX_INT = 10**15  # any count without its own bound (tokens, steps, sizes): beyond every real run, exact as a float
MAX_SEED = 2**32 - 1  # what every generator a seed reaches accepts (numpy's legacy seeds, torch after offsets)
RECIPES = presets.names()  # one YAML file each in backend/presets/, and custom (a phase list)
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
ATTN_IMPLEMENTATIONS = ("auto", "sdpa", "eager", "flex_attention", "flash_attention_2")
DECAY_SHAPES = ("1-sqrt", "linear")
LR_SHAPES = ("warmup_constant", "constant", *DECAY_SHAPES)  # of a phase in the list form


@dataclass(frozen=True)
class Key:
    key: str
    default: Any
    kind: str  # int | float | bool | autobool (auto|true|false) | str | choice | layers | betas | mapping | path |
    # trackers (a list of choices) | rates (a list of numbers in (0, 1))
    help: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    optional: bool = False  # null allowed
    choices: tuple = ()
    label: str | None = None  # in the Launch form when set
    form: int = 0  # order in the form
    advanced: bool = False
    widget: str | None = None  # form widget when not implied by the kind: model | corpus | sci (a number as text)
    form_choices: tuple = ()  # the choices the form offers, when fewer than ``choices``

    def __post_init__(self) -> None:  # an integer is bounded where it is used: none is unbounded
        if self.kind == "int" and self.hi is None:
            object.__setattr__(self, "hi", MAX_INT)

    def range_text(self) -> str:
        """The allowed range as the bound that is really checked: 'in [0, 1]', '>= 0', '> 0' ('inf' is never
        written: an infinite value is refused, so '[0, inf]' would name a value that fails)."""
        if self.lo is not None and self.hi is not None:
            left, right = ("(" if self.lo_open else "["), (")" if self.hi_open else "]")
            return f"in {left}{_num_text(self.lo)}, {_num_text(self.hi)}{right}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {_num_text(self.lo)}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {_num_text(self.hi)}"
        return "finite"


def _num_text(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


_FREEZE_HELP = "blocks kept bit-identical: a range like '0-7' or '0-3,6' (blank/null = none)"

SCHEMA: list[Key] = [
    Key("name", "detour", "str", "run name: letters, digits, _ - . (a folder under runs/; never overwritten)",
        label="Run name", form=1),
    Key("recipe", "pair", "choice", presets.help_text("phases written as a list; the default then"),
        choices=RECIPES, label="Recipe", form=2, form_choices=presets.form_names()),
    # model
    Key("model.name", DEFAULT_MODEL, "str", "bundled name | local folder | run dir | hub id | from_scratch",
        label="Model", form=3, widget="model"),
    Key("model.from_scratch", None, "mapping", "architecture mapping when model.name is from_scratch", optional=True),
    Key("model.tokenizer", None, "str", "tokenizer (default: the model's own)", optional=True),
    Key("model.attn_implementation", "auto", "choice",
        "auto (ModernBERT on CUDA: flash_attention_2 if installed, else flex_attention; otherwise sdpa) | sdpa | "
        "eager | flex_attention (CUDA) | flash_attention_2 (GPU extra)",
        choices=ATTN_IMPLEMENTATIONS, label="Attention implementation", form=40, advanced=True),
    Key("model.trust_remote_code", False, "bool", "run the model repository's own code (opt in per model)",
        label="Trust remote code for this model", form=4),
    # data
    Key("data.corpus", "demo", "str", "demo | .txt/.jsonl/.parquet/.csv file or folder | hub dataset id",
        label="Corpus", form=5, widget="corpus"),
    Key("data.text_column", "text", "str", "text column of jsonl/csv/parquet/hub data",
        label="Text column (jsonl/csv/parquet/hub)", form=30, advanced=True),
    Key("data.hub_split", "train", "str", "split of a hub dataset"),
    Key("data.heldout_fraction", 0.05, "float", "document-level held-out split (fixed seed: the same for every run)",
        lo=0, hi=0.5, hi_open=True),
    Key("data.heldout_file", None, "path", "held-out text from a file instead of a split", optional=True),
    Key("data.skip_non_text", False, "bool",
        "skip corpus cells that are not text (null, number, list, bytes) instead of refusing the file; they are "
        "counted in data_info.json and the log"),
    Key("data.max_documents", None, "int", "use only the first N documents", lo=1, optional=True,
        label="Max documents (blank = all)", form=31, advanced=True),
    # train
    Key("train.seq_len", 256, "int", "tokens per packed sequence", lo=8, hi=65536, label="Sequence length", form=15),
    Key("train.batch_size", 16, "int", "sequences per process and micro-batch", lo=1,
        label="Batch size (sequences)", form=14),
    Key("train.grad_accum", 1, "int", "micro-batches per optimizer step", lo=1,
        label="Gradient accumulation", form=32, advanced=True),
    Key("train.precision", "auto", "choice",
        "auto (bf16 on CUDA and on CPUs with fast bf16, else fp32) | fp32 | bf16 | fp16",
        choices=PRECISIONS, label="Precision", form=21),
    Key("train.seed", 0, "int", "masks and initialisation noise", lo=0, hi=MAX_SEED),
    Key("train.data_seed", None, "int", "data order; null = train.seed (a seed-noise control keeps it)", lo=0,
        hi=MAX_SEED, optional=True, label="Data-order seed (blank = the run's seed)", form=33, advanced=True),
    Key("train.lr", 2.0e-4, "float", "peak learning rate", lo=0, lo_open=True, hi=1,
        label="Peak learning rate", form=12, widget="sci"),
    Key("train.betas", [0.9, 0.98], "betas", "AdamW betas"),
    Key("train.eps", 1.0e-6, "float", "AdamW epsilon", lo=0, lo_open=True),
    Key("train.weight_decay", 1.0e-5, "float", "decoupled: each step shrinks weights by wd * lr / peak_lr", lo=0,
        label="Weight decay (decoupled)", form=35, advanced=True, widget="sci"),
    Key("train.warmup_tokens", None, "int", "linear LR warm-up at the start; null = 10% of the main phase", lo=0,
        optional=True, label="LR warm-up tokens (blank = 10% of main)", form=13),
    Key("train.total_tokens", None, "int", "the run's token budget when phases is a list: phases given as a "
        "fraction take their share of it, and the list's budgets must add up to it (null = the sum of the list)",
        lo=1, optional=True, label="Total tokens (a timeline list's fractions are of it; blank = the list's sum)",
        form=11),
    Key("train.max_grad_norm", 1.0, "float", "gradient clipping; null = none", lo=0, optional=True),
    Key("train.fsdp", False, "bool", "shard the model across GPUs (accelerate launch)"),
    Key("train.compile", "auto", "autobool",
        "auto (on with a CUDA GPU, off on CPU) | true | false: torch.compile the encoder, kernels cached across runs",
        label="torch.compile the encoder (auto: on with a CUDA GPU)", form=34, advanced=True,
        form_choices=("auto", "true", "false")),
    # phases
    Key("phases.warmup.tokens", 0, "int", "optional MLM warm-up phase before main (0 = none)", lo=0, optional=True,
        label="MLM warm-up tokens before main (0 = none)", form=7),
    Key("phases.warmup.steps", None, "int", "warm-up budget in steps instead of tokens", lo=0, optional=True),
    Key("phases.warmup.mlm_probability", 0.30, "float", "warm-up masking rate", lo=0, hi=1, lo_open=True,
        hi_open=True),
    Key("phases.main.tokens", 200_000, "int", "main-phase budget (CLM for the detour, MLM for the baseline)", lo=0,
        optional=True, label="Main-phase tokens (CLM detour / MLM 30%)", form=6),
    Key("phases.main.steps", None, "int", "main-phase budget in steps instead of tokens", lo=0, optional=True),
    Key("phases.main.mlm_probability", 0.30, "float", "masking rate of recipe mlm / pretrain", lo=0, hi=1,
        lo_open=True, hi_open=True, label="Main-phase masking rate (mlm recipe)", form=9),
    Key("phases.main.freeze.layers", None, "layers", _FREEZE_HELP, optional=True,
        label="Freeze layers during main", form=16),
    Key("phases.main.freeze.embeddings", False, "bool", "keep the embeddings fixed in main",
        label="Freeze embeddings during main", form=17),
    Key("phases.main.freeze.head", False, "bool", "keep the head (final norm, prediction head) fixed in main"),
    Key("phases.decay.fraction", 0.10, "float", "decay length as a fraction of main's tokens (paper: 0.10)", lo=0,
        hi=1, label="Decay fraction (of main-phase tokens)", form=8),
    Key("phases.decay.tokens", None, "int", "decay budget in tokens instead of the fraction", lo=0, optional=True),
    Key("phases.decay.steps", None, "int", "decay budget in steps instead of the fraction", lo=0, optional=True),
    Key("phases.decay.mlm_probability", 0.15, "float", "decay masking rate", lo=0, hi=1, lo_open=True, hi_open=True,
        label="Decay masking rate", form=10),
    Key("phases.decay.shape", "1-sqrt", "choice", "LR shape from the peak down to final_lr_ratio (no warm-up)",
        choices=DECAY_SHAPES, label="Decay shape", form=36, advanced=True),
    Key("phases.decay.final_lr_ratio", 0.10, "float", "where the decay ends, as a fraction of the peak LR", lo=0,
        hi=1),
    Key("phases.decay.freeze.layers", None, "layers", _FREEZE_HELP, optional=True,
        label="Freeze layers during decay", form=18),
    Key("phases.decay.freeze.embeddings", False, "bool", "keep the embeddings fixed in the decay",
        label="Freeze embeddings during decay", form=19),
    Key("phases.decay.freeze.head", False, "bool", "keep the head fixed in the decay"),
    # presets that expand to a phase list (backend/detour/recipe.py)
    Key("pair.mlm_probability", 0.30, "float",
        "pair with phases as a list: the baseline's masking rate, in place of each CLM phase", lo=0, hi=1,
        lo_open=True, hi_open=True, label="Baseline masking rate (in place of each CLM phase)", form=42),
    Key("hybrid.clm_share", 0.5, "float", "recipe hybrid: the share of hybrid.tokens trained with CLM first "
        "(0 = pure MLM, 1 = pure CLM); the rest is MLM", lo=0, hi=1, label="CLM share of the budget (then MLM)",
        form=44),
    Key("hybrid.tokens", 200_000, "int", "recipe hybrid: the run's total token budget, CLM and MLM together", lo=1,
        label="Run tokens (CLM and MLM together)", form=43),
    Key("hybrid.mlm_probability", 0.40, "float", "recipe hybrid: masking rate of the MLM part (seed paper: 40%)",
        lo=0, hi=1, lo_open=True, hi_open=True, label="Masking rate of the MLM part", form=45),
    Key("hybrid.decay_fraction", 0.0, "float", "recipe hybrid: an LR decay (1-sqrt to 10%) over this last share "
        "of the run, same objective (0 = warm-up then constant, as far as the seed paper says)", lo=0, hi=1,
        hi_open=True, label="Decay fraction (of the run's tokens)", form=46),
    Key("mask_schedule.rates", [0.30, 0.15, 0.05], "rates",
        "recipe mask_schedule: MLM masking rates, one phase each, in order (mmBERT: 0.30, 0.15, 0.05)",
        label="Masking rates, one phase each, in order", form=48),
    Key("mask_schedule.tokens", 200_000, "int", "recipe mask_schedule: the run's total token budget", lo=1,
        label="Run tokens (all phases)", form=47),
    Key("mask_schedule.shares", None, "rates", "recipe mask_schedule: each rate's share of the budget, adding up "
        "to 1 (null = equal shares)", optional=True, label="Shares of the budget (blank = equal)", form=49),
    Key("mask_schedule.decay_shape", "1-sqrt", "choice", "recipe mask_schedule: LR shape of the last phase "
        "(down to 10% of the peak) when there are several; constant = no decay", choices=LR_SHAPES[1:],
        label="LR shape of the last phase", form=50),
    Key("alternate.blocks", "clm:4, mlm:16, clm:4", "str", "recipe alternate: objective:weight blocks in order, the "
        "budget split by weight (AntLM: clm:4, mlm:16, clm:4); any registered objective (an unknown one is "
        "refused with the list)", label="Blocks (objective:weight, in order)", form=52),
    Key("alternate.tokens", 200_000, "int", "recipe alternate: the run's total token budget", lo=1,
        label="Run tokens (all blocks)", form=51),
    Key("alternate.mlm_probability", 0.15, "float", "recipe alternate: masking rate of the blocks that mask", lo=0,
        hi=1, lo_open=True, hi_open=True, label="Masking rate of the blocks that mask", form=53),
    Key("alternate.decay_shape", "1-sqrt", "choice", "recipe alternate: LR shape of the last block (down to 10% of "
        "the peak) when there are several; constant = no decay", choices=LR_SHAPES[1:],
        label="LR shape of the last block", form=54),
    Key("mixed.causal_share", 1 / 16, "float", "recipe mixed: share of each step's rows trained causally, the rest "
        "masked (GPT-BERT: about 1 to 15)", lo=0, hi=1, label="Causal share of each step's rows", form=56),
    Key("mixed.mlm_probability", 0.15, "float", "recipe mixed: masking rate of the masked rows", lo=0, hi=1,
        lo_open=True, hi_open=True, label="Masking rate of the masked rows", form=57),
    Key("mixed.tokens", 200_000, "int", "recipe mixed: the run's total token budget", lo=1,
        label="Run tokens (causal and masked rows together)", form=55),
    Key("mixed.decay_fraction", 0.1, "float", "recipe mixed: a 1-sqrt LR decay over this last share of the run "
        "(0 = none)", lo=0, hi=1, hi_open=True, label="Decay fraction (of the run's tokens)", form=58),
    # logging
    Key("logging.log_every", 5, "int", "steps between training-loss rows", lo=1,
        label="Log every (steps)", form=37, advanced=True),
    Key("logging.eval_every", 25, "int", "steps between held-out evaluations", lo=1,
        label="Held-out eval every (steps)", form=38, advanced=True),
    Key("logging.eval_batches", 8, "int", "held-out batches per evaluation", lo=1),
    Key("logging.checkpoint_every", 100, "int", "steps between checkpoints", lo=1,
        label="Checkpoint every (steps)", form=39, advanced=True),
    Key("logging.keep_checkpoints", 2, "int", "checkpoints kept (older ones are deleted; phase-end ones stay)", lo=1,
        label="Keep checkpoints", form=41, advanced=True),
    Key("logging.report_to", [], "trackers",
        "experiment trackers that also get every metric: tensorboard | trackio | wandb | mlflow (none: offline, "
        "metrics.jsonl only)", choices=tuple(TRACKERS), label="Report to (experiment trackers)", form=22),
    # slurm: where the run trains when it goes to a cluster (train/sweep --executor slurm); no weight depends on it
    Key("slurm.partition", None, "str", "Slurm partition (null = the cluster's default)", optional=True,
        label="Slurm partition", form=60, advanced=True),
    Key("slurm.time_min", 1440, "int", "Slurm time limit in minutes; the job checkpoints and is requeued before it",
        lo=1, label="Slurm time limit (minutes)", form=61, advanced=True),
    Key("slurm.cpus_per_task", 8, "int", "Slurm CPUs per task", lo=1, label="Slurm CPUs per task", form=62,
        advanced=True),
    Key("slurm.gpus_per_task", 0, "int", "Slurm GPUs per job (>1: accelerate launch over them)", lo=0,
        label="Slurm GPUs per task", form=63, advanced=True),
    Key("slurm.account", None, "str", "Slurm account to charge (null = yours by default)", optional=True,
        label="Slurm account", form=64, advanced=True),
    Key("slurm.sbatch", None, "str", "extra #SBATCH options, space-separated: --qos=high --constraint=a100",
        optional=True, label="Extra #SBATCH options", form=65, advanced=True),
    Key("slurm.signal_delay_s", 120, "int", "seconds before the time limit at which Slurm tells the job to "
        "checkpoint (--signal=USR2@S)", lo=1),
]  # fmt: skip
BY_KEY = {k.key: k for k in SCHEMA}


def defaults() -> dict:
    """The nested default config (a fresh copy)."""
    import copy

    out: dict = {}
    for k in SCHEMA:
        node = out
        *parents, leaf = k.key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = copy.deepcopy(k.default)
    return out


def form_keys() -> list[Key]:
    """The keys the Launch form shows, in its order."""
    return sorted((k for k in SCHEMA if k.label), key=lambda k: k.form)


def annotated_yaml(cfg: dict) -> str:
    """``cfg`` as YAML with each key's help as a comment (what ``validate --print`` shows)."""
    import yaml

    sections = {k.key.rsplit(".", i)[0] for k in SCHEMA for i in range(1, k.key.count(".") + 1)}
    lines: list[str] = []

    def emit(node: dict, prefix: str, indent: int) -> None:
        for name, value in node.items():
            key, pad = f"{prefix}{name}", "  " * indent
            if key in sections and isinstance(value, dict):
                lines.append(f"{pad}{name}:")
                emit(value, key + ".", indent + 1)
                continue
            text = yaml.safe_dump({name: value}, default_flow_style=True, sort_keys=False, width=10_000).strip()
            help_ = BY_KEY[key].help if key in BY_KEY else ""
            lines.append(f"{pad}{text[1:-1]}" + (f"  # {help_}" if help_ else ""))

    emit({k: v for k, v in cfg.items() if k != "_meta"}, "", 0)
    return "\n".join(lines) + "\n"
