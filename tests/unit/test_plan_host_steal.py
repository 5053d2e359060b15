"""The stolen share of CPU time read from a ``/proc/stat`` first line (Linux's ``steal`` field,
the 8th number), and nothing where the file or the field is missing."""
from paddle_ext.plan.host_steal import cpu_ticks, fraction_between, steal_meter


def _stat(tmp_path, line):
    p = tmp_path / "stat"
    p.write_text(line + "\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    return str(p)


def test_ticks_are_all_eight_fields_and_the_steal_one(tmp_path):
    # user nice system idle iowait irq softirq steal guest guest_nice
    assert cpu_ticks(_stat(tmp_path, "cpu  100 0 30 800 10 0 5 55 0 0")) == (1000, 55)


def test_no_steal_field_or_no_file_is_unknown(tmp_path):
    assert cpu_ticks(_stat(tmp_path, "cpu  100 0 30 800")) is None
    assert cpu_ticks(str(tmp_path / "missing")) is None
    assert fraction_between((10, 1), (10, 1)) is None      # no time passed


def test_meter_records_a_share_between_zero_and_one():
    out = {}
    with steal_meter(out):
        sum(range(200000))
    assert "steal_fraction" in out
    assert out["steal_fraction"] is None or 0.0 <= out["steal_fraction"] <= 1.0
