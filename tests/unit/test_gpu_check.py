"""tools/gpu_check.sh: refuses GPU mode where there are no GPUs, and says how to run on a CPU."""
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "gpu_check.sh"


def test_gpu_mode_on_a_cpu_machine_says_to_use_the_double(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "at least 1 visible GPU" in proc.stderr and "found 0" in proc.stderr and "--cpu-double" in proc.stderr


def test_unknown_argument_is_named(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), "--gpus", "8"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown argument --gpus" in proc.stderr
