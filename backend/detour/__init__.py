"""The detour, readable top to bottom in four files (with ``backend/presets/`` and ``backend/objectives/`` below the
engine, since the config checks read them):

``recipe.py``      the timeline: which phases run (a written list, or a preset: CLM detour -> MLM decay, the MLM
                   baseline, hybrid splits, mask schedules), LR per step, frozen parameters, the one optimizer that
                   spans every phase;
``attention.py``   the causal switch that keeps ModernBERT's sliding window;
``encoder_lm.py``  one forward from inputs and labels to the loss, through the model's own MLM head;
``trainer.py``     the loop over the phases.
"""
