"""A bundle's tokenizer (``--tokenizer``): the files copied into it, its special token ids and chat template.

``tokenizer`` is a tokenizer.json or a folder holding one (a Hugging Face model folder). tokenizer.json is
copied as it is, once validated and checked to fit the model's vocabulary. Beside it:

- tokenizer_config.json / special_tokens_map.json, read as JSON objects and written afresh, made from
  tokenizer.json when absent (onnxruntime-genai's tokenizer does not load without tokenizer_config.json);
- the chat template: chat_template.jinja (transformers saves it so), else tokenizer_config.json's
  ``chat_template``, else chat_template.json's. The bundle gets it in both places: chat_template.jinja
  (transformers, Optimum) and tokenizer_config.json's ``chat_template`` (onnxruntime-genai, transformers.js);
- generation_config.json / config.json: only their bos/eos/pad token ids are read.

The bos/eos/pad ids the bundle's configs name are, for each, the first of: generation_config.json's,
config.json's (what transformers generates with: SmolLM2's tokenizer_config.json may name another eos than
its config.json), the token tokenizer_config.json then special_tokens_map.json name, and last tokenizer.json's
special tokens by their names (``genai.special_token_ids``). An id the model has no row for is refused.

A file read beside tokenizer.json that is a link must stay in the tokenizer's folder (the one named, or the
one tokenizer.json's own link leads to, as in a Hugging Face cache); each file is capped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ltsedge.errors import LtsedgeError
from ltsedge.exporters.genai import special_token_ids
from ltsedge.files import read_capped

TOKENIZER_LIMIT = 256 * 2**20  # the largest tokenizer.json files published are a few tens of MB
COMPANION_LIMIT = 16 * 2**20
COMPANIONS = ("tokenizer_config.json", "special_tokens_map.json")
TOKENIZER_FILE = "tokenizer.json"
TEMPLATE_FILE = "chat_template.jinja"
MODEL_CONFIGS = ("generation_config.json", "config.json")  # in the order their ids are taken
KINDS = ("bos", "eos", "pad")


@dataclass(frozen=True)
class TokenizerFiles:
    files: dict[str, bytes]  # name -> the bytes written into the bundle
    data: dict | None  # tokenizer.json's content
    generated: tuple[str, ...] = ()  # companions made from tokenizer.json: none was beside it
    given: dict = field(default_factory=dict)  # "eos_token_id" ... -> the id the tokenizer's files name

    def token_ids(self, arch) -> dict:
        """The bos/eos/pad ids the bundle's configs name (the defaults without a tokenizer)."""
        return special_token_ids(arch, self.data, self.given)


def read_tokenizer(tokenizer: str | Path | None, directory: Path, arch) -> TokenizerFiles:
    """The tokenizer's files as written into ``directory``, checked to fit ``arch``; nothing is written."""
    if tokenizer is None:
        return TokenizerFiles({}, None)
    path = _tokenizer_path(Path(tokenizer))
    raw = read_capped(path, "tokenizer file", TOKENIZER_LIMIT)
    data = _parse_json(raw, path, "tokenizer file", "is not a tokenizer.json (Hugging Face tokenizers)")
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise LtsedgeError(f"tokenizer file {path} is not a tokenizer.json (Hugging Face tokenizers): no 'model'")
    _check_added_tokens(data, path)
    _check_fits(data, path, arch.vocab_size)
    folders = {path.parent.resolve(), path.resolve().parent}
    documents = {name: _json_beside(path, name, folders) for name in (*COMPANIONS, *MODEL_CONFIGS)}
    template = _chat_template(path, folders, documents["tokenizer_config.json"])
    given = _given_ids(data, documents, arch.vocab_size, path.parent)
    files = {TOKENIZER_FILE: raw}
    generated = tuple(name for name in COMPANIONS if documents[name] is None)
    made = _companions(data, arch, special_token_ids(arch, data, given))
    companions = {name: documents[name] if documents[name] is not None else made[name] for name in COMPANIONS}
    if template is not None:
        companions["tokenizer_config.json"] = {**companions["tokenizer_config.json"], "chat_template": template}
    if isinstance(template, str):  # (a list of named templates lives in tokenizer_config.json only)
        files[TEMPLATE_FILE] = template.encode()
    files.update({name: _json_bytes(document) for name, document in companions.items()})
    sources = [path, *(path.with_name(name) for name in [*COMPANIONS, TEMPLATE_FILE]
                       if name in files and os.path.lexists(path.with_name(name)))]
    for source in sources:  # `--tokenizer DIR/tokenizer.json -o DIR`: it would be overwritten by itself
        if (directory / source.name).resolve() == source.resolve():
            raise LtsedgeError(f"the tokenizer {source} is already in {directory}: export the bundle to another "
                               f"directory (-o)")
    return TokenizerFiles(files, data, generated, given)


def _tokenizer_path(path: Path) -> Path:
    """The tokenizer.json named, or the one in the folder named."""
    if path.is_dir():
        if not os.path.lexists(path / TOKENIZER_FILE):
            raise LtsedgeError(f"tokenizer folder {path} has no {TOKENIZER_FILE}: give a tokenizer.json or the "
                               f"folder holding one")
        path = path / TOKENIZER_FILE
    if not path.is_file():
        raise LtsedgeError(f"tokenizer file not found: {path}" if not path.exists() else
                           f"tokenizer file {path} is not a regular file")
    if path.name != TOKENIZER_FILE:
        raise LtsedgeError(f"tokenizer file {path}: name it {TOKENIZER_FILE} (the name runtimes look for)")
    return path


def _beside(path: Path, name: str, folders: set[Path]) -> Path | None:
    """The file ``name`` beside tokenizer.json, None where there is none; a link leading out is refused."""
    companion = path.with_name(name)
    if not os.path.lexists(companion):
        return None
    real = companion.resolve()
    if not any(real.parent == f or f in real.parents for f in folders):
        raise LtsedgeError(f"tokenizer companion {companion} is a link to {real}, outside the tokenizer's folder: "
                           f"refusing to copy it into the bundle")
    return companion


def _json_beside(path: Path, name: str, folders: set[Path]) -> dict | None:
    companion = _beside(path, name, folders)
    if companion is None:
        return None
    document = _parse_json(read_capped(companion, "tokenizer companion", COMPANION_LIMIT), companion,
                           "tokenizer companion", "is not JSON")
    if not isinstance(document, dict):
        raise LtsedgeError(f"tokenizer companion {companion} is not a JSON object")
    return document


def _chat_template(path: Path, folders: set[Path], config: dict | None) -> str | list | None:
    """chat_template.jinja's text, else tokenizer_config.json's template (a list of named ones stays there
    alone), else chat_template.json's; None without one."""
    jinja = _beside(path, TEMPLATE_FILE, folders)
    if jinja is not None:
        try:
            return read_capped(jinja, "chat template", COMPANION_LIMIT).decode()
        except UnicodeDecodeError as e:
            raise LtsedgeError(f"chat template {jinja} is not UTF-8 text: {e}") from None
    for source in ("tokenizer_config.json", "chat_template.json"):
        document = config if source == "tokenizer_config.json" else _json_beside(path, source, folders)
        template = (document or {}).get("chat_template")
        if template is not None and not isinstance(template, (str, list)):
            raise LtsedgeError(f"tokenizer companion {path.with_name(source)}: 'chat_template' must be text, not "
                               f"{type(template).__name__}")
        if template is not None:
            return template
    return None


def _given_ids(data: dict, documents: dict, vocab_size: int, folder: Path) -> dict:
    """Each of bos/eos/pad's id from the first of the tokenizer's files naming it (the module's order)."""
    ids = _token_ids(data)
    given: dict = {}
    for kind in KINDS:
        key = f"{kind}_token_id"
        for name in MODEL_CONFIGS:  # ids
            value = (documents[name] or {}).get(key)
            if value is not None and key not in given:
                given[key] = _checked_id(value, key, folder / name, vocab_size, many=kind == "eos")
        for name in COMPANIONS:  # tokens, by content
            token = (documents[name] or {}).get(f"{kind}_token")
            content = token.get("content") if isinstance(token, dict) else token
            if key not in given and isinstance(content, str) and content in ids:
                given[key] = ids[content]
    return given


def _checked_id(value, key: str, source: Path, vocab_size: int, many: bool):
    """A token id (eos: or a list of them) of the model's vocabulary."""
    values = value if many and isinstance(value, list) and value else [value]
    for v in values:
        if type(v) is not int or not 0 <= v < vocab_size:  # not a bool
            raise LtsedgeError(f"{source}: {key} {json.dumps(value)} is not a token id of the model (0 to "
                               f"{vocab_size - 1})")
    return value


def _token_ids(data: dict) -> dict[str, int]:
    """Token text -> id: the vocabulary's (BPE, WordPiece, WordLevel) and the added tokens'."""
    vocab = data["model"].get("vocab")
    ids = dict(vocab) if isinstance(vocab, dict) else {}
    ids.update({t["content"]: t["id"] for t in data.get("added_tokens", []) if isinstance(t.get("content"), str)})
    return ids


def _check_fits(data: dict, path: Path, vocab_size: int) -> None:
    """Every token id the tokenizer can produce must have a row in the model's embedding and logits."""
    vocab = data["model"].get("vocab") or {}
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: token -> id
        ids = list(vocab.values())
        if not all(type(i) is int and i >= 0 for i in ids):  # not a bool
            raise LtsedgeError(f"tokenizer file {path}: model.vocab must map tokens to non-negative integer ids")
    elif isinstance(vocab, list):  # Unigram: [token, score] pairs, the id is the position
        ids = [len(vocab) - 1] if vocab else []
    else:
        raise LtsedgeError(f"tokenizer file {path}: model.vocab must be an object or a list, not "
                           f"{type(vocab).__name__}")
    ids += [token["id"] for token in data.get("added_tokens", [])]  # checked: non-negative integers
    largest = max(ids, default=-1)
    if largest >= vocab_size:
        raise LtsedgeError(f"tokenizer file {path} does not fit the model: its token ids go up to {largest}, the "
                           f"architecture's vocab_size is {vocab_size} (ids must be below it)")


def _companions(data: dict, arch, ids: dict) -> dict[str, dict]:
    """tokenizer_config.json and special_tokens_map.json as a Hugging Face folder has them, from
    tokenizer.json: the special tokens of the bos/eos/pad ``ids`` the bundle's configs name (and unk) and the
    model's context as model_max_length."""
    special = {t["id"]: t["content"] for t in data.get("added_tokens", [])
               if t.get("special") and isinstance(t.get("content"), str)}
    first = {kind: ids[f"{kind}_token_id"][0] if isinstance(ids[f"{kind}_token_id"], list) else ids[f"{kind}_token_id"]
             for kind in KINDS}
    tokens = {f"{kind}_token": special[first[kind]] for kind in KINDS if first[kind] in special}
    unk = data["model"].get("unk_token")
    unk = unk if isinstance(unk, str) else next((c for c in special.values() if "unk" in c.lower()), None)
    if unk is not None:
        tokens["unk_token"] = unk
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": arch.n_positions,
              "clean_up_tokenization_spaces": False,  # decode as tokenizers does
              **tokens}
    return {"tokenizer_config.json": config, "special_tokens_map.json": tokens}


def _json_bytes(document: dict) -> bytes:
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode()


def _parse_json(raw: bytes, path: Path, what: str, meaning: str):
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LtsedgeError(f"{what} {path} {meaning}: {e}") from None
    except RecursionError:
        raise LtsedgeError(f"{what} {path} {meaning}: nested too deeply") from None


def _check_added_tokens(data: dict, path: Path) -> None:
    """The special tokens are read for the bos/eos/pad ids: a list of objects with an integer id."""
    tokens = data.get("added_tokens", [])
    if not isinstance(tokens, list):
        raise LtsedgeError(f"tokenizer file {path}: 'added_tokens' must be a list of tokens, not "
                           f"{type(tokens).__name__ if tokens is not None else 'null'}")
    for i, token in enumerate(tokens):
        if not isinstance(token, dict):
            raise LtsedgeError(f"tokenizer file {path}: added_tokens[{i}] must be an object with 'id' and 'content'")
        tid = token.get("id")
        if not isinstance(tid, int) or isinstance(tid, bool) or tid < 0:
            raise LtsedgeError(f"tokenizer file {path}: added_tokens[{i}].id must be a non-negative integer, "
                               f"not {json.dumps(tid)}")
