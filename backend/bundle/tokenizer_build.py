"""Train the bundled general-English tokenizer (byte-level BPE, ModernBERT-style specials).

General-domain vocabulary is deliberate: biomedical words fragment, as they do for
ModernBERT, which is the setting where domain adaptation matters.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
_PG_START = re.compile(r"^\*\*\* ?START OF (THIS|THE) PROJECT GUTENBERG EBOOK.*$", re.M | re.I)
_PG_END = re.compile(
    r"^(\*\*\* ?END OF (THIS|THE) PROJECT GUTENBERG EBOOK.*|End of (the )?Project Gutenberg.*)$", re.M | re.I
)


def strip_gutenberg(text: str) -> str:
    """Keep the book text between Project Gutenberg's START and END marker lines."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    start = _PG_START.search(text)
    if start:
        text = text[start.end() :]
    end = _PG_END.search(text)
    if end:
        text = text[: end.start()]
    return text.strip()


def paragraphs(text: str) -> Iterator[str]:
    """Blank-line separated paragraphs with hard wraps joined."""
    for block in re.split(r"\n\s*\n", text):
        para = " ".join(line.strip() for line in block.splitlines() if line.strip())
        if para:
            yield para


def build_tokenizer(texts: list[str], out_dir: str | Path, vocab_size: int = 8192, model_max_length: int = 512):
    """Train byte-level BPE on ``texts`` and save a ``PreTrainedTokenizerFast`` to ``out_dir``."""
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[AddedToken(t, special=True, lstrip=t == "[MASK]") for t in SPECIALS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        # lstrip: "the [MASK] is" masks the word with its leading space, as RoBERTa's <mask> does.
        mask_token=AddedToken("[MASK]", lstrip=True, special=True),
        bos_token="[CLS]",
        eos_token="[SEP]",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)
    return fast


def gutenberg_paragraphs(folder: str | Path) -> list[str]:
    texts: list[str] = []
    for f in sorted(Path(folder).glob("*.txt")):
        texts.extend(paragraphs(strip_gutenberg(f.read_text(encoding="utf-8", errors="replace"))))
    return texts
