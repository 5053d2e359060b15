"""The C++ build cache key names the wheel a library was built against, not just its version."""
import os
import re

import paddle
import pytest

from paddle_ext.compat.native import cpp_build
from paddle_ext.errors import CompatError


def test_the_key_changes_with_the_wheels_cuda_version_commit_and_path(monkeypatch):
    base = cpp_build.build_dir("fast_key", "int x;")
    assert cpp_build.build_dir("fast_key", "int x;") == base  # stable for one wheel
    assert cpp_build.build_dir("fast_key", "int y;") != base  # and per source
    monkeypatch.setattr(paddle.version, "cuda", lambda: "12.6")
    cuda = cpp_build.build_dir("fast_key", "int x;")
    monkeypatch.setattr(paddle.version, "commit", "0" * 40)
    commit = cpp_build.build_dir("fast_key", "int x;")
    monkeypatch.setattr(paddle, "__file__", "/elsewhere/site-packages/paddle/__init__.py")
    where = cpp_build.build_dir("fast_key", "int x;")
    assert len({base, cuda, commit, where}) == 4
    assert all(d.startswith(cpp_build.cache_root()) and f"-{paddle.__version__}-" in d for d in (base, where))


def test_each_piece_is_a_cc_file_and_an_edited_file_builds_elsewhere(tmp_path, monkeypatch):
    for kind, (name, filename, _) in cpp_build.PIECES.items():
        path = cpp_build.source_path(kind)
        assert path == os.path.join(cpp_build.SOURCE_DIR, filename) and path.endswith(".cc")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        assert cpp_build.piece(kind)[:2] == (name, text)
        assert cpp_build.paths(kind)[0] == cpp_build.build_dir(kind, text)
    before = cpp_build.paths("fast_key")
    with open(cpp_build.source_path("fast_key"), encoding="utf-8") as f:
        edited = f.read() + "// an edit\n"
    (tmp_path / "fast_key.cc").write_text(edited, encoding="utf-8")
    (tmp_path / "gloo_ops.cc").write_text("// not read here\n", encoding="utf-8")
    monkeypatch.setattr(cpp_build, "SOURCE_DIR", str(tmp_path))
    after = cpp_build.paths("fast_key")
    assert after[0] != before[0] and after[0] == cpp_build.build_dir("fast_key", edited)


def test_a_missing_source_or_kind_says_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(CompatError, match=re.escape("no paddle-ext C++ piece 'nope'; known: fast_key, gloo_ops")):
        cpp_build.piece("nope")
    monkeypatch.setattr(cpp_build, "SOURCE_DIR", str(tmp_path))
    with pytest.raises(CompatError, match="fast_key.cc cannot be read .*reinstall paddle-ext"):
        cpp_build.piece("fast_key")
