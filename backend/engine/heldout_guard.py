"""A held-out file must not be training text: the held-out loss would then measure memorisation.

Before this, ``data.heldout_file`` equal to (or contained in) the training corpus was accepted and the held-out curve
was measured on text the model trained on. Refused when the file is one of the corpus's files (after resolving
paths and links), or when any of its documents is also a training document (compared by content hash, document by
document as the token store reads them). One streaming pass over a local corpus; a hub corpus is not compared.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from backend.core.errors import DataError
from backend.engine.data import corpus_files, iter_documents


def _digest(doc: str) -> bytes:
    return hashlib.sha256(doc.encode("utf-8")).digest()[:16]


def check_disjoint(data_cfg: dict) -> None:
    """Raise DataError naming the file and the overlap when ``data.heldout_file`` shares text with ``data.corpus``."""
    held = data_cfg.get("heldout_file")
    if not held:
        return
    files = corpus_files(data_cfg["corpus"])
    if files is None:
        return  # a hub dataset: not streamed here
    held_path = Path(held).expanduser().resolve()
    if held_path in {f.resolve() for f in files}:
        raise DataError(
            f"data.heldout_file: {held} is a file of the training corpus ({data_cfg['corpus']}): the held-out loss "
            "would be measured on training text; give a file that is not part of the corpus"
        )
    column = data_cfg["text_column"]
    held_docs = {_digest(d) for d in iter_documents(str(held_path), column)}
    spec = (data_cfg["corpus"], column, data_cfg["hub_split"], data_cfg["max_documents"])
    shared = {h for h in map(_digest, iter_documents(*spec)) if h in held_docs}
    if shared:
        raise DataError(
            f"data.heldout_file: {len(shared)} of its {len(held_docs)} distinct documents are also in the training "
            f"corpus ({data_cfg['corpus']}): the held-out loss would partly measure training text; remove them from "
            "one of the two"
        )
