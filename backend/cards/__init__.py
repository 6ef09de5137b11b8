"""Model cards: every model the lab makes carries a README.md in the Hugging Face Hub's format (YAML metadata that
``huggingface_hub.ModelCard`` reads, and a body with the evidence), and can be exported as a self-contained folder
or pushed to the Hub.

- ``lineage.py``: what a model derives from (the base model as the Hub names it, its licence from its own card);
- ``card_file.py``: reading and writing a card (atomic; never over the network);
- ``run_card.py``: a run's ``final/README.md`` from the run directory's files (timeline, tokens per phase, held-out
  losses, precision, machine, wall time);
- ``finetuned_card.py``: a kept fine-tuned model's card from its ``metrics.json``;
- ``results.py``: the evaluations and suites that measured a model, as ``model-index`` results with their intervals;
- ``export.py``: ``python -m backend export``, the Runs tab's Export button, and the push to the Hub.

A run's ``final/`` is sealed (``engine/checkpoint.py``): the card is written beside the seal, never in it, so
adding evaluation results later rewrites only the card and the manifest stays true.
"""

CARD = "README.md"
LIBRARY = "transformers"
TAG = "detour-lab"
