"""README's two commands are the ones that work: CI runs the test command verbatim."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    head = text[:text.index("## What is here")]
    return re.findall(r"```bash\n(.+?)\n```", head)


def test_readme_starts_with_the_two_commands():
    main_job, tests = _readme_commands()[:2]
    assert "pip install -e" in main_job and "paddle-ext" in main_job
    assert "pip install -e" in tests and "pytest" in tests


def test_ci_runs_the_readme_test_command():
    tests = _readme_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci, "the last line of .ci/run must be README's test command, verbatim"


def test_setup_maps_subpackages_without_new_top_level_names():
    import paddle_ext.passes
    import paddle_ext.spmd_rules

    assert Path(paddle_ext.passes.__file__).parent == ROOT / "passes"
    assert Path(paddle_ext.spmd_rules.__file__).parent == ROOT / "spmd_rules"
    top_level = (ROOT / "paddle_ext.egg-info" / "top_level.txt")
    if top_level.exists():  # written by `pip install -e .`
        assert top_level.read_text().split() == ["paddle_ext"]
    setup = (ROOT / "setup.py").read_text()
    assert '"paddle_ext.spmd_rules": "spmd_rules"' in setup and '"paddle_ext.passes": "passes"' in setup


def test_test_module_basenames_are_unique():
    # pytest's default import mode imports test modules by basename: two files with one name
    # stop the whole collection
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
