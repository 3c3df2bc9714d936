"""The user's text as the parent's token ids: read as UTF-8 and tokenized with the model's own tokenizer
(``tokenizer.json``, by the ``tokenizers`` library transformers' fast tokenizers run on), so the windows are
what the model reads in an app. A tokenizer with more tokens than the model has embeddings belongs to another
model: refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ltsedge.errors import LtsedgeError
from ltsedge.extras import require

TOKENIZER = "tokenizer.json"


def text_tokens(text_file: str | Path, tokenizer: str | Path | None, vocab_size: int) -> np.ndarray:
    """The token ids of ``text_file`` under ``tokenizer`` (a tokenizer.json or the folder holding one)."""
    text_file = Path(text_file)
    if not text_file.is_file():
        raise LtsedgeError(f"--text {text_file}: file not found")
    try:
        text = text_file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise LtsedgeError(f"--text {text_file} is not UTF-8 text (byte {e.start}): give plain text") from None
    if not text.strip():
        raise LtsedgeError(f"--text {text_file} holds no text")
    encoder = load_tokenizer(tokenizer)
    size = encoder.get_vocab_size(with_added_tokens=True)
    if size > vocab_size:
        raise LtsedgeError(f"the tokenizer has {size:,} tokens but the model embeds {vocab_size:,}: they are not "
                           f"one model's")
    return np.asarray(encoder.encode(text, add_special_tokens=False).ids, dtype=np.int64)


def load_tokenizer(tokenizer: str | Path | None):
    if tokenizer is None:
        raise LtsedgeError("the model folder holds no tokenizer.json: the text cannot be read as the model's tokens")
    path = Path(tokenizer)
    path = path / TOKENIZER if path.is_dir() else path
    if not path.is_file():
        raise LtsedgeError(f"tokenizer not found: {path}")
    tokenizers = require("tokenizers", "reading text as the model's tokens")
    try:
        return tokenizers.Tokenizer.from_file(str(path))
    except Exception as e:  # noqa: BLE001 - the library raises plain Exceptions for a bad file
        raise LtsedgeError(f"{path} is not a tokenizer the tokenizers library reads ({str(e).splitlines()[0]})") \
            from None
