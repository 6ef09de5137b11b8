"""The similarity measures by name (no torch here: the CLI's argument parser and the app's controls read them).
The formulas are in :mod:`backend.analysis.cka`."""

from __future__ import annotations

MEASURES = {
    "debiased": "debiased linear CKA (unbiased HSIC; Song et al. 2012, Nguyen et al. 2021)",
    "linear": "linear CKA (Kornblith et al. 2019; biased at small n; the detour paper's measure)",
    "procrustes": "orthogonal Procrustes similarity 1 - d²/2 (Ding et al. 2021)",
}
SHORT = {"debiased": "Debiased CKA", "linear": "Linear CKA (biased)", "procrustes": "Procrustes similarity"}
DEFAULT_MEASURE = "debiased"
MIN_SAMPLES = {"debiased": 4, "linear": 2, "procrustes": 2}  # below: the estimator is undefined
