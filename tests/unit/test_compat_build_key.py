"""The C++ build cache key names the wheel a library was built against, not just its version."""
import paddle

from paddle_ext.compat import cpp_build


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
