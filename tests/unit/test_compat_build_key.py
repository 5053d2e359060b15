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


def test_each_piece_is_its_cc_files_joined_and_an_edited_file_builds_elsewhere(tmp_path, monkeypatch):
    for kind, (name, files, _) in cpp_build.PIECES.items():
        files = (files,) if isinstance(files, str) else files
        paths = cpp_build.source_paths(kind)
        assert paths == [os.path.join(cpp_build.SOURCE_DIR, f) for f in files] and all(p.endswith(".cc") for p in paths)
        assert cpp_build.source_path(kind) == paths[0]
        texts = []
        for path in paths:
            with open(path, encoding="utf-8") as f:
                texts.append(f.read())
        assert cpp_build.piece(kind)[:2] == (name, "\n".join(texts))
        assert cpp_build.paths(kind)[0] == cpp_build.build_dir(kind, "\n".join(texts))
    assert len(cpp_build.source_paths("fast_key")) == 2   # fast_key.cc, then fast_route.cc
    before = cpp_build.paths("fast_key")
    for path in cpp_build.source_paths("fast_key"):
        with open(path, encoding="utf-8") as f:
            (tmp_path / os.path.basename(path)).write_text(f.read(), encoding="utf-8")
    (tmp_path / "gloo_ops.cc").write_text("// not read here\n", encoding="utf-8")
    monkeypatch.setattr(cpp_build, "SOURCE_DIR", str(tmp_path))
    assert cpp_build.paths("fast_key") == (before[0], cpp_build.library_path("paddle_ext_fast_key", before[0]))
    second = tmp_path / "fast_route.cc"   # an edit of the second file alone builds elsewhere too
    second.write_text(second.read_text(encoding="utf-8") + "// an edit\n", encoding="utf-8")
    after = cpp_build.paths("fast_key")
    assert after[0] != before[0] and after[0] == cpp_build.build_dir("fast_key", cpp_build.piece("fast_key")[1])


def test_a_missing_source_or_kind_says_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(CompatError, match=re.escape("no paddle-ext C++ piece 'nope'; known: fast_key, gloo_ops")):
        cpp_build.piece("nope")
    monkeypatch.setattr(cpp_build, "SOURCE_DIR", str(tmp_path))
    with pytest.raises(CompatError, match="fast_key.cc cannot be read .*reinstall paddle-ext"):
        cpp_build.piece("fast_key")
