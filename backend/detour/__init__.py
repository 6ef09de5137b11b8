"""The detour, readable top to bottom in five files:

``recipe.py``      the timeline: which phases run (a written list, or a preset: CLM detour -> MLM decay, the MLM
                   baseline, hybrid splits, mask schedules), LR per step, frozen parameters, the one optimizer that
                   spans every phase;
``attention.py``   the causal switch that keeps ModernBERT's sliding window;
``objectives.py``  CLM labels (shifted by one) and MLM masking: what a packed batch becomes;
``encoder_lm.py``  one forward from inputs and labels to the loss, through the model's own MLM head;
``trainer.py``     the loop over the phases.
"""
