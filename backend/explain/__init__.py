"""Makes the objectives visible: what each layer may attend to under MLM and under the CLM detour, how surprised
each model is by every token of a text under each objective, and both through a run's checkpoints.

Nothing here draws what the recipe *should* do: the masks are read from a real forward under the trainer's own
``causal_attention`` and checked by perturbing inputs, and the CLM losses come from the trainer's ``clm_labels``.
The app's Detour tab and ``python -m backend explain`` call these functions.
"""

from backend.explain.checkpoints import run_checkpoints
from backend.explain.masks import attention_patterns
from backend.explain.surprise import token_surprise

__all__ = ["attention_patterns", "run_checkpoints", "token_surprise"]
