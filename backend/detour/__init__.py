"""The detour, readable top to bottom in four files and two folders:

``recipe.py``      the timeline: which phases run (a written list, or a preset: CLM detour -> MLM decay, the MLM
                   baseline, hybrid splits, mask schedules), LR per step, frozen parameters, the one optimizer that
                   spans every phase;
``attention.py``   the causal switch that keeps ModernBERT's sliding window;
``presets/``       the named recipes as data, one YAML file each: the shape of its timeline and its objectives;
``objectives/``    one small module per objective (``mlm``, ``clm``, ``mntp``, ``prefix``, ``mixed``): its attention,
                   what a packed batch becomes (inputs, labels), its settings, held-out loss and how it is shown;
``encoder_lm.py``  one forward from inputs and labels to the loss, through the model's own MLM head;
``trainer.py``     the loop over the phases.
"""
