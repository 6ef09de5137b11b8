"""Released-style models, made by hand: the kinds of checkpoint people inspecting released encoders have in their
Hugging Face cache, tiny, with real (seeded random) weights saved as safetensors.

Each tokenizer is trained with the ``tokenizers`` library on the bundled demo corpus and saved the way released
checkpoints ship it: ``tokenizer.json`` with the model's own normalizer, pre-tokenizer, post-processor and decoder,
``tokenizer_config.json`` naming the class transformers loads (``BertTokenizer``, ``CamembertTokenizer``,
``RobertaTokenizer``), and the older files beside it where the family has them (BERT's ``vocab.txt``, RoBERTa's
``vocab.json`` / ``merges.txt``):

* ``biolab/bert-wordpiece``: a WordPiece BERT, uncased, ``##`` marking a piece that continues a word (PubMedBERT,
  BioBERT, SciBERT);
* ``biolab/camembert-unigram``: a SentencePiece/Unigram CamemBERT-style model, ``▁`` marking a piece that starts a
  word (CamemBERT, XLM-R);
* ``biolab/roberta-bytelevel``: a byte-level BPE RoBERTa, ``Ġ`` standing for the space before a word;
* ``biolab/bio-ner-tagger``: a ``ModernBertForTokenClassification`` with its own ``id2label`` (Chemical, Disease,
  Gene) and the bundled byte-level tokenizer;
* ``biolab/bert-ner-wordpiece``: a ``BertForTokenClassification`` on the WordPiece tokenizer, with another label set
  (CHEMICAL, DISEASE, SPECIES).

``put_in_hub_cache`` lays a folder out exactly as huggingface_hub stores a download (``models--org--name/blobs``,
``snapshots/<commit>/`` of links to the blobs, ``refs/main``), so a hub id resolves from the cache as a user's does.
``python -m tests.released_models --cache DIR`` writes the five into ``DIR`` (for a walk through the app).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import torch

from backend.core.paths import ASSETS_DIR, BUNDLED_TOKENIZER_DIR

CORPUS = ASSETS_DIR / "demo" / "bio_corpus.txt"
VOCAB = 1200  # small, so that biomedical words split into pieces ("aspirin" -> "asp ##irin")
WIDTHS = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
NER_LABELS = ["O", "B-Chemical", "I-Chemical", "B-Disease", "I-Disease", "B-Gene", "I-Gene"]
OTHER_NER_LABELS = ["O", "B-CHEMICAL", "I-CHEMICAL", "B-DISEASE", "I-DISEASE", "B-SPECIES", "I-SPECIES"]


# --- tokenizers, as released checkpoints ship them ----------------------------------------------------------------


def _train(tk, trainer, chars: int = 60_000) -> None:
    """Train on the corpus's first ``chars`` characters (a few hundred sentences: enough for a 1,200-piece
    vocabulary, and quick)."""
    tk.train_from_iterator(CORPUS.read_text(encoding="utf-8")[:chars].splitlines(), trainer)


def wordpiece_tokenizer(decoder: bool = True):
    """BERT's pipeline: lower-casing BertNormalizer, BertPreTokenizer, ``[CLS] $A [SEP]``, the WordPiece decoder
    (``decoder=False``: none, as in checkpoints whose tokenizer.json was written without one)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tk = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    _train(
        tk,
        trainers.WordPieceTrainer(
            vocab_size=VOCAB, special_tokens=specials, continuing_subword_prefix="##", show_progress=False
        ),
    )
    cls, sep = tk.token_to_id("[CLS]"), tk.token_to_id("[SEP]")
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    if decoder:
        tk.decoder = decoders.WordPiece(prefix="##")
    return tk


def unigram_tokenizer():
    """CamemBERT's pipeline: NFKC, Metaspace (``▁`` before each word), ``<s> $A </s>``, the Metaspace decoder;
    ``<mask>`` swallows the space before it, as CamemBERT's does."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    tk = Tokenizer(models.Unigram())
    tk.normalizer = normalizers.NFKC()
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=VOCAB, special_tokens=specials, unk_token="<unk>", show_progress=False)
    _train(tk, trainer, chars=30_000)
    tk.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    bos, eos = tk.token_to_id("<s>"), tk.token_to_id("</s>")
    tk.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", bos), ("</s>", eos)]
    )
    tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tk


def bytelevel_tokenizer():
    """RoBERTa's pipeline: ByteLevel pre-tokenizer without a prefix space (``Ġ`` is the space before a word),
    ``<s> $A </s>``, the ByteLevel decoder; ``<mask>`` swallows the space before it."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    tk = Tokenizer(models.BPE(unk_token=None))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    _train(tk, trainer)
    tk.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    tk.post_processor = processors.RobertaProcessing(("</s>", tk.token_to_id("</s>")), ("<s>", tk.token_to_id("<s>")))
    tk.decoder = decoders.ByteLevel()
    return tk


def _save_tokenizer(tk, out: Path, config: dict) -> None:
    tk.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 128, **config}, indent=2))
    specials = {k: v for k, v in config.items() if k.endswith("_token")}
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=2))


BERT_TOKENS = dict(unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
ROBERTA_TOKENS = dict(
    bos_token="<s>", eos_token="</s>", unk_token="<unk>", sep_token="</s>", pad_token="<pad>", cls_token="<s>",
    mask_token="<mask>",
)  # fmt: skip


def save_wordpiece(out: Path, decoder: bool = True, tokenizer_class: str = "BertTokenizer") -> Path:
    """The WordPiece tokenizer as BERT checkpoints ship it: tokenizer.json and vocab.txt."""
    tk = wordpiece_tokenizer(decoder)
    vocab = sorted(tk.get_vocab().items(), key=lambda kv: kv[1])
    (out / "vocab.txt").write_text("".join(f"{t}\n" for t, _ in vocab))
    _save_tokenizer(tk, out, {"tokenizer_class": tokenizer_class, "do_lower_case": True, **BERT_TOKENS})
    return out


def save_unigram(out: Path) -> Path:
    _save_tokenizer(unigram_tokenizer(), out, {"tokenizer_class": "CamembertTokenizer", **ROBERTA_TOKENS})
    return out


def save_bytelevel(out: Path) -> Path:
    """The byte-level BPE as RoBERTa checkpoints ship it: tokenizer.json, vocab.json and merges.txt."""
    tk = bytelevel_tokenizer()
    state = json.loads(tk.to_str())["model"]
    (out / "vocab.json").write_text(json.dumps(state["vocab"], ensure_ascii=False))
    merges = [" ".join(m) if isinstance(m, list) else m for m in state["merges"]]
    (out / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{m}\n" for m in merges))
    _save_tokenizer(tk, out, {"tokenizer_class": "RobertaTokenizer", "add_prefix_space": False, **ROBERTA_TOKENS})
    return out


# --- models ---------------------------------------------------------------------------------------------------------


def _ids(out: Path) -> dict:
    """The special-token ids of the tokenizer saved in ``out``, for the model's config."""
    vocab = json.loads((out / "tokenizer.json").read_text())
    added = {t["content"]: t["id"] for t in vocab["added_tokens"]}
    size = max([*added.values(), *_model_ids(vocab["model"])]) + 1
    pad = added.get("[PAD]", added.get("<pad>"))
    bos = added.get("[CLS]", added.get("<s>"))
    eos = added.get("[SEP]", added.get("</s>"))
    return dict(vocab_size=size, pad_token_id=pad, bos_token_id=bos, eos_token_id=eos)


def _model_ids(model: dict) -> list[int]:
    vocab = model["vocab"]
    return list(range(len(vocab))) if isinstance(vocab, list) else list(vocab.values())


def _save_model(model, out: Path, what: str) -> Path:
    from backend.engine.models import quiet_transformers

    with quiet_transformers():  # no progress bar per file written
        model.save_pretrained(out, safe_serialization=True)
    (out / "README.md").write_text(f"---\nlicense: cc0-1.0\n---\n# {what}\n\nA tiny test model (random weights).\n")
    return out


def wordpiece_bert(out: Path, decoder: bool = True, tokenizer_class: str = "BertTokenizer") -> Path:
    from transformers import BertConfig, BertForMaskedLM

    save_wordpiece(out, decoder, tokenizer_class)
    torch.manual_seed(11)
    cfg = BertConfig(**WIDTHS, max_position_embeddings=128, **_ids(out))
    return _save_model(BertForMaskedLM(cfg).eval(), out, "WordPiece BERT")


def unigram_camembert(out: Path) -> Path:
    from transformers import CamembertConfig, CamembertForMaskedLM

    save_unigram(out)
    torch.manual_seed(12)
    cfg = CamembertConfig(**WIDTHS, max_position_embeddings=130, **_ids(out))
    return _save_model(CamembertForMaskedLM(cfg).eval(), out, "SentencePiece/Unigram CamemBERT")


def bytelevel_roberta(out: Path) -> Path:
    from transformers import RobertaConfig, RobertaForMaskedLM

    save_bytelevel(out)
    torch.manual_seed(13)
    cfg = RobertaConfig(**WIDTHS, max_position_embeddings=130, **_ids(out))
    return _save_model(RobertaForMaskedLM(cfg).eval(), out, "byte-level BPE RoBERTa")


def _label_maps(labels: list[str]) -> dict:
    return dict(id2label=dict(enumerate(labels)), label2id={lab: i for i, lab in enumerate(labels)})


def _mostly_outside(model, tokenizer, labels: list[str], share: float = 0.2) -> None:
    """A released tagger says O for most words: its head's bias for O is set so that about ``share`` of the
    corpus's tokens get an entity label (measured on its first sentences), as a random head alone would tag
    nearly every word."""
    text = CORPUS.read_text(encoding="utf-8")[:3000]
    ids = tokenizer(text, truncation=True, max_length=120, return_tensors="pt")["input_ids"]
    o = labels.index("O")
    with torch.no_grad():
        model.classifier.bias.zero_()
        logits = model(input_ids=ids).logits[0]
        margin = logits.max(-1).values - logits[:, o]
        model.classifier.bias[o] = float(margin.quantile(1 - share))


def modernbert_tagger(out: Path, labels: list[str] | None = None) -> Path:
    """A ModernBertForTokenClassification with its own id2label, on the bundled byte-level tokenizer."""
    from transformers import AutoTokenizer, ModernBertConfig, ModernBertForTokenClassification

    from backend.engine.models import special_token_ids

    labels = labels or NER_LABELS
    tok = AutoTokenizer.from_pretrained(BUNDLED_TOKENIZER_DIR)
    tok.save_pretrained(out)
    torch.manual_seed(14)
    cfg = ModernBertConfig(**WIDTHS, max_position_embeddings=128, vocab_size=len(tok), local_attention=16,
                           global_attn_every_n_layers=2, **special_token_ids(tok), **_label_maps(labels))  # fmt: skip
    model = ModernBertForTokenClassification(cfg).eval()
    _mostly_outside(model, tok, labels)
    return _save_model(model, out, "ModernBERT NER tagger")


def bert_tagger(out: Path, labels: list[str] | None = None) -> Path:
    """A BertForTokenClassification on the WordPiece tokenizer, with a label set of its own."""
    from transformers import AutoTokenizer, BertConfig, BertForTokenClassification

    labels = labels or OTHER_NER_LABELS
    save_wordpiece(out)
    torch.manual_seed(15)
    cfg = BertConfig(**WIDTHS, max_position_embeddings=128, **_ids(out), **_label_maps(labels))
    model = BertForTokenClassification(cfg).eval()
    _mostly_outside(model, AutoTokenizer.from_pretrained(out), labels)
    return _save_model(model, out, "WordPiece BERT NER tagger")


RELEASED = {
    "biolab/bert-wordpiece": wordpiece_bert,
    "biolab/camembert-unigram": unigram_camembert,
    "biolab/roberta-bytelevel": bytelevel_roberta,
    "biolab/bio-ner-tagger": modernbert_tagger,
    "biolab/bert-ner-wordpiece": bert_tagger,
}
ENCODERS = ("biolab/bert-wordpiece", "biolab/camembert-unigram", "biolab/roberta-bytelevel")
TAGGERS = ("biolab/bio-ner-tagger", "biolab/bert-ner-wordpiece")


# --- the hub cache's layout -----------------------------------------------------------------------------------------


def commit_of(repo_id: str) -> str:
    """A 40-hex commit for the snapshot folder, fixed per hub id."""
    return hashlib.sha1(repo_id.encode()).hexdigest()


def put_in_hub_cache(cache: Path, repo_id: str, files: dict[str, bytes], commit: str | None = None) -> Path:
    """``files`` as the hub client stores a download: content-addressed blobs, a snapshot of relative links to them,
    ``refs/main`` naming the snapshot. Returns the snapshot folder."""
    commit = commit or commit_of(repo_id)
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    for name, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / digest).write_bytes(data)
        (snap / name).symlink_to(Path("..") / ".." / "blobs" / digest)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snap


def cache_folder(cache: Path, repo_id: str, folder: Path) -> Path:
    """Every file of a model folder into the cache as ``repo_id``."""
    return put_in_hub_cache(cache, repo_id, {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()})


def build_cache(cache: Path, names: tuple[str, ...] | list[str] = tuple(RELEASED)) -> dict[str, Path]:
    """The released-style models ``names`` built and put into the hub cache ``cache``: {hub id: snapshot}."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            folder = Path(tmp) / name.replace("/", "--")
            folder.mkdir()
            RELEASED[name](folder)
            out[name] = cache_folder(cache, name, folder)
            shutil.rmtree(folder)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write a Hugging Face cache of tiny released-style models.")
    p.add_argument("--cache", required=True, type=Path, help="the cache folder (use it as HF_HUB_CACHE)")
    p.add_argument("--names", nargs="+", default=list(RELEASED), choices=list(RELEASED))
    args = p.parse_args(argv)
    for name, snap in build_cache(args.cache, args.names).items():
        print(f"{name}: {snap}")
    print(f"export HF_HUB_CACHE={args.cache.resolve()} HF_HUB_OFFLINE=1")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
