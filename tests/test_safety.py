"""Hostile input from files (issue 23): paths read from a file stay inside their folder; nothing is
written through a link or over a device or FIFO; a file ltsedge did not write is never overwritten or
deleted; tokenizer companions are validated, capped and written afresh; nothing from a file reaches the
HTML report unescaped. Each refusal is one line on stderr and exit code 2."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ltsedge.errors import LtsedgeError
from ltsedge.files import write_file
from ltsedge.search.outdir import MANIFEST, OutputDir
from tests.conftest import tiny_arch
from tests.helpers import one_line_exit_2, run_ltsedge

TOKENIZER = {"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []},
             "added_tokens": [{"id": 499, "content": "<|endoftext|>", "special": True}]}


def export(output, variant="forward", **kwargs):
    from ltsedge.exporters.bundle import export_to_path
    from ltsedge.exporters.options import ExportOptions

    return export_to_path(tiny_arch(), output, ExportOptions(variant=variant), **kwargs)


def tokenizer_dir(tmp_path, tokenizer=TOKENIZER):
    folder = tmp_path / "tok"
    folder.mkdir(exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    return folder / "tokenizer.json"


# --- 1. a crafted manifest never reaches outside the output directory -------------------------------
def test_a_manifest_listing_paths_outside_out_is_refused_and_nothing_outside_is_deleted(tmp_path):
    out = tmp_path / "out"
    (out / ".scratch").mkdir(parents=True)  # as after a killed run
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "a" / "b").mkdir(parents=True)
    (out / MANIFEST).write_text(json.dumps({"format": 1, "files": [".scratch/../../victim.txt",
                                                                   ".scratch/../../a/b/x"]}))
    with pytest.raises(LtsedgeError, match="a path outside"):
        OutputDir(out).open()
    assert victim.read_text() == "precious" and (tmp_path / "a" / "b").is_dir()


@pytest.mark.parametrize("entry", ["/etc/passwd", "", ".", "models/../../x", "models\\..\\..\\x"])
def test_absolute_empty_or_climbing_manifest_entries_are_refused(tmp_path, entry):
    (tmp_path / MANIFEST).write_text(json.dumps({"format": 1, "files": [entry]}))
    with pytest.raises(LtsedgeError, match="a path outside"):
        OutputDir(tmp_path).open()


def test_a_manifest_entry_through_a_link_leading_outside_is_refused(tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (elsewhere / "x.onnx").write_text("someone else's")
    (out / ".scratch").symlink_to(elsewhere)
    (out / MANIFEST).write_text(json.dumps({"format": 1, "files": [".scratch/x.onnx"]}))
    with pytest.raises(LtsedgeError, match="'.scratch/x.onnx', a path outside"):
        OutputDir(out).open()
    assert (elsewhere / "x.onnx").read_text() == "someone else's"


def test_an_owned_folder_that_links_outside_is_never_written_through(tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "models").symlink_to(elsewhere)
    with OutputDir(out) as outdir:
        with pytest.raises(LtsedgeError, match="refusing 'models/a.onnx': a path outside"):
            outdir.path("models/a.onnx")
    assert list(elsewhere.iterdir()) == []


def test_a_lock_file_or_manifest_linked_elsewhere_is_never_truncated(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for name in (".ltsedge.lock", MANIFEST, MANIFEST + ".partial"):
        out = tmp_path / name.strip(".")
        out.mkdir()
        (out / name).symlink_to(victim)
        with pytest.raises(LtsedgeError, match="symbolic link"):
            OutputDir(out).open()
        assert victim.read_text() == "precious"


def test_report_refuses_a_crafted_manifest_in_one_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).write_text(json.dumps({"format": 1, "files": ["report/../../victim.txt"]}))
    one_line_exit_2(run_ltsedge("report", out), "a path outside")


# --- 2. export -o EXISTING_DIR: only ltsedge's own files are replaced, never through a link ---------------
def test_export_generate_refuses_to_overwrite_a_users_file_and_writes_nothing(tmp_path):
    bundle = tmp_path / "mine"
    bundle.mkdir()
    (bundle / "config.json").write_text('{"mine": true}')
    arch = tmp_path / "arch.json"
    arch.write_text(tiny_arch().to_json())
    proc = run_ltsedge("export", arch, "--variant", "generate", "-o", bundle)
    one_line_exit_2(proc, "config.json was not written by ltsedge export")
    assert (bundle / "config.json").read_text() == '{"mine": true}'
    assert sorted(p.name for p in bundle.iterdir()) == ["config.json"]


def test_export_generate_replaces_its_own_bundle_but_never_writes_through_a_link(tmp_path):
    bundle, victim = tmp_path / "b", tmp_path / "victim.txt"
    victim.write_text("precious")
    export(bundle, variant="generate")
    first = (bundle / "model.onnx").read_bytes()
    export(bundle, variant="generate")  # its own files (the manifest records them): replaced
    assert (bundle / "model.onnx").read_bytes() == first
    (bundle / "genai_config.json").unlink()
    (bundle / "genai_config.json").symlink_to("../victim.txt")
    with pytest.raises(LtsedgeError, match="'genai_config.json', a path outside"):
        export(bundle, variant="generate")
    assert victim.read_text() == "precious"
    (bundle / "genai_config.json").unlink()
    (bundle / "genai_config.json").symlink_to("config.json")  # a link that stays inside: not written through
    config = (bundle / "config.json").read_bytes()
    with pytest.raises(LtsedgeError, match="genai_config.json: it is a symbolic link"):
        export(bundle, variant="generate")
    assert (bundle / "config.json").read_bytes() == config


def test_a_link_in_a_directory_without_manifest_is_refused_as_not_ltsedges(tmp_path):
    bundle, victim = tmp_path / "b", tmp_path / "victim.txt"
    victim.write_text("precious")
    bundle.mkdir()
    (bundle / "genai_config.json").symlink_to("../victim.txt")
    with pytest.raises(LtsedgeError, match="genai_config.json was not written by ltsedge export"):
        export(bundle, variant="generate")
    assert victim.read_text() == "precious" and not (bundle / "model.onnx").exists()


# --- 3. only regular files or new paths are written -------------------------------------------------
def test_export_refuses_to_replace_a_fifo(tmp_path, arch_file):
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    one_line_exit_2(run_ltsedge("export", arch_file(), "-o", fifo), "it is a FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_export_never_replaces_a_link_nor_writes_through_a_leftover_partial(tmp_path):
    victim = tmp_path / "victim.onnx"
    victim.write_bytes(b"precious")
    (tmp_path / "link.onnx").symlink_to(victim)
    with pytest.raises(LtsedgeError, match="it is a symbolic link"):
        export(tmp_path / "link.onnx")
    (tmp_path / "m.onnx.partial").symlink_to(victim)  # planted where the model is first written
    with pytest.raises(LtsedgeError, match="m.onnx.partial: it is a symbolic link"):
        export(tmp_path / "m.onnx")
    assert victim.read_bytes() == b"precious" and (tmp_path / "link.onnx").is_symlink()


def test_write_file_writes_regular_files_only_and_replaces_a_killed_writes_leftover(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "d").mkdir()
    for name, kind in (("fifo", "a FIFO"), ("d", "a directory")):
        with pytest.raises(LtsedgeError, match=f"it is {kind}"):
            write_file(tmp_path / name, b"x")
    (tmp_path / "f.partial").write_bytes(b"half")  # left by a kill -9
    write_file(tmp_path / "f", b"whole")
    assert (tmp_path / "f").read_bytes() == b"whole" and not (tmp_path / "f.partial").exists()
    assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o644
    (tmp_path / "g").write_bytes(b"precious")
    os.link(tmp_path / "g", tmp_path / "h.partial")  # a leftover that is another file's second name
    with pytest.raises(LtsedgeError, match="hard links"):
        write_file(tmp_path / "h", b"x")
    assert (tmp_path / "g").read_bytes() == b"precious"


# --- 4. the tokenizer and its companions --------------------------------------------------------------
def test_a_companion_linking_outside_the_tokenizers_folder_is_refused(tmp_path):
    tokenizer = tokenizer_dir(tmp_path)
    secret = tmp_path / "shadow"
    secret.write_text('{"root": "x"}')
    (tokenizer.parent / "special_tokens_map.json").symlink_to(secret)
    with pytest.raises(LtsedgeError, match="outside the tokenizer's folder"):
        export(tmp_path / "b", variant="generate", tokenizer=tokenizer)
    assert not (tmp_path / "b").exists()


def test_a_companion_linked_within_the_folder_is_written_afresh_as_a_json_object_0644(tmp_path):
    tokenizer = tokenizer_dir(tmp_path)
    (tokenizer.parent / "real_config.json").write_text('{"model_max_length": 64}')
    os.chmod(tokenizer.parent / "real_config.json", 0o600)
    (tokenizer.parent / "tokenizer_config.json").symlink_to("real_config.json")
    export(tmp_path / "b", variant="generate", tokenizer=tokenizer)
    written = tmp_path / "b" / "tokenizer_config.json"
    assert not written.is_symlink() and json.loads(written.read_text()) == {"model_max_length": 64}
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    assert (tmp_path / "b" / "tokenizer.json").read_bytes() == tokenizer.read_bytes()


@pytest.mark.parametrize("content, message", [("[1, 2]", "is not a JSON object"), ("{nope", "is not JSON"),
                                              ("[" * 100_000 + "]" * 100_000, "nested too deeply")])
def test_a_companion_that_is_not_a_json_object_is_refused_before_anything_is_written(tmp_path, content, message):
    tokenizer = tokenizer_dir(tmp_path)
    (tokenizer.parent / "tokenizer_config.json").write_text(content)
    with pytest.raises(LtsedgeError, match=message):
        export(tmp_path / "b", variant="generate", tokenizer=tokenizer)
    assert not (tmp_path / "b").exists()


def test_an_oversized_companion_or_a_fifo_is_refused(tmp_path):
    tokenizer = tokenizer_dir(tmp_path)
    with open(tokenizer.parent / "tokenizer_config.json", "wb") as f:
        f.truncate(17 * 2**20)  # sparse: no disk used
    with pytest.raises(LtsedgeError, match="17.0 MiB, over the 16 MiB"):
        export(tmp_path / "b", variant="generate", tokenizer=tokenizer)
    (tokenizer.parent / "tokenizer_config.json").unlink()
    os.mkfifo(tokenizer.parent / "tokenizer_config.json")  # never waited on
    with pytest.raises(LtsedgeError, match="is a FIFO, not a regular file"):
        export(tmp_path / "b", variant="generate", tokenizer=tokenizer)
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("added, message", [
    (["x"], "added_tokens[0] must be an object"),
    (None, "'added_tokens' must be a list of tokens, not null"),
    ([{"id": True, "content": "<pad>", "special": True}], "added_tokens[0].id must be a non-negative integer, not true"),
])
def test_malformed_added_tokens_are_one_line_and_leave_no_partial_bundle(tmp_path, arch_file, added, message):
    tokenizer = tokenizer_dir(tmp_path, {**TOKENIZER, "added_tokens": added})
    proc = run_ltsedge("export", arch_file(), "--variant", "generate", "--tokenizer", tokenizer, "-o", tmp_path / "b")
    one_line_exit_2(proc, message)
    assert not (tmp_path / "b").exists()


def test_a_bool_token_id_never_becomes_a_special_token_id():
    from ltsedge.exporters.genai import special_token_ids

    ids = special_token_ids(tiny_arch(), {"added_tokens": [{"id": True, "content": "<pad>", "special": True}]})
    assert ids == {"bos_token_id": 499, "eos_token_id": 499, "pad_token_id": 499}


def test_a_tokenizer_inside_the_output_directory_is_refused_before_the_model_is_written(tmp_path):
    tokenizer = tokenizer_dir(tmp_path)
    with pytest.raises(LtsedgeError, match="is already in"):
        export(tokenizer.parent, variant="generate", tokenizer=tokenizer)
    assert sorted(p.name for p in tokenizer.parent.iterdir()) == ["tokenizer.json"]
