"""The text as token ids: the user's tokenizer, or a byte-level BPE trained on the text (``tokenizers``), and
the held-out chunks.

Held out: at least 1% of the tokens, in windows of one training sequence spread evenly through the text
(from a seeded offset), never its tail: a tail is one kind of text (a folder's last files, a book's last
chapters), and the ranking would be of that kind only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ltsedge.errors import LtsedgeError
from ltsedge.extras import require

DEFAULT_BPE_VOCAB = 8192  # a trained tokenizer's size unless the space's vocabulary is smaller
BYTE_ALPHABET = 256  # a byte-level BPE starts from every byte
PIECE_CHARS = 1 << 20  # texts are split at line ends into ~1 MiB pieces: parallel encoding, bounded memory
ENCODE_BATCH = 16  # pieces encoded at once (an Encoding keeps strings and offsets per token: free them soon)
HELD_OUT_SHARE = 0.01
MIN_HELD_OUT_WINDOWS = 4
MIN_WINDOWS = 5 * MIN_HELD_OUT_WINDOWS  # a text shorter than this many sequences cannot be split usefully


def _tokenizers():
    return require("tokenizers", "proxy-check")


def train_tokenizer(documents: list[str], vocab_size: int):
    """A byte-level BPE of at most ``vocab_size`` tokens trained on the text (fewer where the text runs
    out of merges), with no special tokens: ids are exactly the model's vocabulary."""
    tk = _tokenizers()
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=[],
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    pieces = list(_pieces(documents))
    tokenizer.train_from_iterator(pieces, trainer=trainer, length=len(pieces))
    return tokenizer


def load_tokenizer(path: Path, vocab_size: int):
    """The user's tokenizer.json; refused in one line when unreadable or when its ids do not fit the
    models' vocabulary (an embedding row per id)."""
    tk = _tokenizers()
    if not Path(path).is_file():
        raise LtsedgeError(f"--tokenizer {path} not found")
    try:
        tokenizer = tk.Tokenizer.from_file(str(path))
    except Exception as e:  # noqa: BLE001 - the Rust library raises plain Exceptions for any bad file
        why = (str(e).splitlines() or [type(e).__name__])[0][:120]
        raise LtsedgeError(f"--tokenizer {path} is not a tokenizers JSON file ({why})") from None
    top = max(tokenizer.get_vocab(with_added_tokens=True).values(), default=-1)
    if top >= vocab_size:
        raise LtsedgeError(f"--tokenizer {path} has token ids up to {top}, beyond the space's vocabulary of "
                           f"{vocab_size} (vocab_size): use a space whose vocab_size is at least {top + 1}")
    return tokenizer


def vocabulary(tokenizer) -> int:
    return tokenizer.get_vocab_size(with_added_tokens=True)


def encode(tokenizer, documents: list[str], vocab_size: int) -> np.ndarray:
    """Every document's ids, one after the other (a byte-level BPE needs no separator: whitespace is tokens)."""
    dtype = np.uint16 if vocab_size <= 1 << 16 else np.uint32
    pieces, parts = list(_pieces(documents)), []
    for i in range(0, len(pieces), ENCODE_BATCH):
        for encoding in tokenizer.encode_batch(pieces[i:i + ENCODE_BATCH], add_special_tokens=False):
            parts.append(np.asarray(encoding.ids, dtype=dtype))
    tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    if tokens.size and int(tokens.max()) >= vocab_size:  # a tokenizer whose added tokens overflow at run time
        raise LtsedgeError(f"the tokenizer gave token id {int(tokens.max())}, beyond the vocabulary of {vocab_size}")
    return tokens


def _pieces(documents: list[str]):
    for doc in documents:
        start = 0
        while start < len(doc):
            end = start + PIECE_CHARS
            if end < len(doc):
                newline = doc.rfind("\n", start, end)
                end = newline + 1 if newline > start else end
            yield doc[start:end]
            start = end


@dataclass(frozen=True)
class Split:
    train: np.ndarray  # the tokens with the held-out windows cut out
    held_out: np.ndarray  # [windows, sequence + 1]
    starts: np.ndarray  # where each held-out window starts among the text's tokens

    @property
    def share(self) -> float:
        return self.held_out.size / (self.held_out.size + self.train.size)


def split(tokens: np.ndarray, window: int, seed: int = 0, share: float = HELD_OUT_SHARE) -> Split:
    """Hold out ``share`` of the tokens (at least ``MIN_HELD_OUT_WINDOWS`` windows of ``window`` tokens),
    windows spread evenly over the whole text from a seeded offset."""
    n_windows = len(tokens) // window
    held = max(math.ceil(share * len(tokens) / window), MIN_HELD_OUT_WINDOWS)
    if n_windows < max(MIN_WINDOWS, 4 * held):
        raise LtsedgeError(f"the text is {len(tokens):,} tokens: too little to hold out {held} sequences of "
                           f"{window - 1} and train on the rest (at least {MIN_WINDOWS * window:,} tokens); "
                           f"give more text or a shorter --sequence")
    stride = n_windows / held
    offset = np.random.default_rng(seed).random() * stride
    starts = (np.floor(offset + stride * np.arange(held)).astype(np.int64)) * window
    keep = np.ones(len(tokens), dtype=bool)
    for s in starts:
        keep[s:s + window] = False
    return Split(tokens[keep], tokens[starts[:, None] + np.arange(window)], starts)
