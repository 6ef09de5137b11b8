"""The detour study's definition as data: its arms, its presets and the paper's numbers its report puts beside its
own (``budget_study`` plans and runs it, ``detour_report`` writes its report; both read this)."""

from __future__ import annotations

SUITE = "configs/suites/bio-ner.yaml"
ARMS = {  # arm -> its name in the report; the order is the sweep's
    "mlm": "MLM",
    "clm_detour": "CLM detour",
    "mlm-control": "MLM, another seed (control)",
    "freeze-low": "CLM detour, low third frozen",
    "freeze-mid": "CLM detour, mid third frozen",
}
PAIR_ARMS = ("mlm", "clm_detour")  # --no-interventions: the comparison alone
CKA_MEASURES = ["debiased", "linear"]  # debiased: the lab's default; linear: the paper's numbers

PAPER = {  # what the paper found on the low layers and the freezes (../shared/RECIPE.md), beside this study's numbers
    "cka": "divergence ratio r_l = div(CLM, MLM) / div(MLM seed B, MLM seed A) of 5-44x in layers 0-7 of 22; "
    "control CKA at layer 0 ~ 0.9968; the change persists through the MLM decay",
    "freeze": "22-layer French base (+2.8 pp detour gain): freezing layers 0-7 during CLM eliminated the gain, "
    "freezing layers 8-14 preserved it",
}
PAPER_DELTAS = [  # the paper's per-language ranges of the detour's gain per task (../shared/RECIPE.md)
    {"language": "French", "tasks": "8 biomedical tasks (9 seeds)", "delta_pp": "+1.2 to +2.8", "wins": "8 of 8",
     "scale": "10B-50B tokens, 150M-350M parameters"},
    {"language": "English", "tasks": "11 biomedical tasks (5 seeds)", "delta_pp": "+0.3 to +0.8", "wins": "-",
     "scale": "10B-50B tokens, 150M-350M parameters"},
]  # fmt: skip

# Budgets are main-phase tokens per run (the decay adds decay_fraction of it); ``finetune`` replaces the suite's
# fine-tuning settings for every task (seeds, epochs, example caps).
#
# What each choice buys, by the variance the quick studies measured (bench/results/crossover, `replicate --plan`):
# the verdict is a t over pretraining seeds, so 3 seeds (2 degrees of freedom) pay a heavy price: the quick preset
# detected +-14.8 points at 3 seeds and 3 budgets; at 5 seeds and 2 budgets, for about 15% more time, +-7.6. More
# fine-tuning seeds and evaluation sentences shrink only the per-task share (most of it evaluation noise at 80
# sentences), which at a CPU's cost buys less than a pretraining seed; on a GPU, where a fine-tune costs little,
# whole test splits and two fine-tuning seeds are worth it.
BUDGET_PRESETS: dict[str, dict] = {
    "quick": {
        "description": "CPU demo, sized for a shared 2-core machine: the bundled base at 2.6k and 26k tokens (64-token "
        "sequences), 5 pretraining seeds, the suite on 128 training sentences per task, 2 epochs, 1 fine-tuning "
        "seed. Far too small to conclude anything about the paper.",
        "budgets": [2_560, 25_600],
        "seeds": 5,
        "train": {"seq_len": 64, "batch_size": 4, "lr": 3.0e-4, "precision": "auto", "decay_fraction": 0.10},
        "logging": {"log_every": 5, "eval_every": 1000, "eval_batches": 4, "checkpoint_every": 1000},
        "finetune": {
            "seeds": 1,
            "epochs": 2,
            "lr": 1.0e-3,
            "max_len": 64,
            "max_train_examples": 128,
            "max_eval_examples": 80,
        },  # fmt: skip  (the settings the published quick studies measured)
        "max_concurrent": 2,
        "cka": {"n_texts": 64, "max_len": 64, "measures": CKA_MEASURES},
    },
    "standard": {
        "description": "CPU study: the bundled base at 20k-200k tokens, 8 pretraining seeds, the suite on 300 "
        "training sentences per task, 2 epochs, 1 fine-tuning seed (8 x 1 fine-tunes per arm and budget cost less than "
        "3 x 3 and detect about half the difference).",
        "budgets": [20_480, 65_536, 204_800],
        "seeds": 8,
        "train": {"seq_len": 128, "batch_size": 8, "lr": 3.0e-4, "precision": "auto", "decay_fraction": 0.10},
        "logging": {"log_every": 10, "eval_every": 100, "eval_batches": 8, "checkpoint_every": 1000},
        "finetune": {"seeds": 1, "epochs": 2, "max_train_examples": 300, "max_eval_examples": 200},
        "max_concurrent": 2,
        "cka": {"n_texts": 200, "max_len": 128, "measures": CKA_MEASURES},
    },
    "gpu": {
        "description": "One CUDA GPU, bf16: the bundled base at 1M-100M tokens, 5 pretraining seeds, the suite on "
        "1000 training sentences per task, 3 epochs, 2 fine-tuning seeds, scored on whole dev and test splits (cheap "
        "on a GPU); weights dropped after measuring.",
        "budgets": [1_000_000, 10_000_000, 100_000_000],
        "seeds": 5,
        "train": {"seq_len": 256, "batch_size": 32, "lr": 1.0e-3, "precision": "bf16", "decay_fraction": 0.10},
        "logging": {"log_every": 50, "eval_every": 500, "eval_batches": 16, "checkpoint_every": 2000},
        "finetune": {"seeds": 2, "epochs": 3, "max_train_examples": 1000, "max_eval_examples": None},
        "max_concurrent": 1,
        "drop_weights": True,
        "cka": {"n_texts": 500, "max_len": 128, "measures": CKA_MEASURES},
    },
    "paper": {
        "description": "The paper's token range (0.1B-10B per run) and the suite's full protocol (its own settings); "
        "pass the paper's size of base with --model. Days on a GPU node (each 10B-token run is most of it, so 3 "
        "pretraining seeds; --pretrain-seeds 5 roughly halves the detectable difference); --plan says how long here.",
        "budgets": [100_000_000, 1_000_000_000, 10_000_000_000],
        "seeds": 3,
        "train": {"seq_len": 1024, "batch_size": 64, "lr": 5.0e-4, "precision": "bf16", "decay_fraction": 0.10},
        "logging": {"log_every": 100, "eval_every": 2000, "eval_batches": 32, "checkpoint_every": 5000},
        "finetune": {},
        "max_concurrent": 1,
        "drop_weights": True,
        "cka": {"n_texts": 500, "max_len": 128, "measures": CKA_MEASURES},
    },
}
