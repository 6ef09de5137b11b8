"""The detour, readable top to bottom in four files:

``recipe.py``      which phases run (CLM detour -> MLM decay, or the MLM baseline), LR per step, frozen parameters,
                   the one optimizer that spans every phase;
``attention.py``   the causal switch that keeps ModernBERT's sliding window;
``objectives.py``  CLM labels (shifted by one) and MLM masking, both through the same MLM head;
``trainer.py``     the loop.
"""
