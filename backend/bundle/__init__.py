"""Building the bundled offline default: the tokenizer and the tiny base model's model card."""
