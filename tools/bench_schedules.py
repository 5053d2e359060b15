"""Time the schedule generators, the simulator and the lowering at a large size.

    python tools/bench_schedules.py [--stages 64] [--microbatches 512] [--lowering]

Prints one row per schedule: generate, validate (static checks), simulate (which includes the
static checks), and optionally add_send_recv + simulating the lowered schedule. Each figure is the
best of ``--repeat`` runs (wall time; "(cpu)" is this process's CPU time for generate + simulate). The target is under a second for generate + simulate at
p = 64, m = 512. A calibration line (a fixed pure-Python loop) shows how fast this machine is
right now, since other processes can slow every figure down (the development VM idles at about
330 us; it read 1500 us under a load average of 10). Pure Python; no Paddle import.
"""
import argparse
import time

from paddle_ext.passes import (add_send_recv, generate_schedule, get_schedule_info, schedule_names,
                               simulate_schedule)
from paddle_ext.passes.structure import check_structure


def timed(fn, *args, repeat: int = 1, **kwargs):
    """(value, best wall time, best CPU time of this process) over ``repeat`` runs."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        value = fn(*args, **kwargs)
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    return value, wall, cpu


def calibration_us() -> tuple:
    """Best (wall, CPU) time of sum(range(10**4)) in microseconds: how fast this machine is now."""
    _, wall, cpu = timed(lambda: [sum(range(10000)) for _ in range(100)], repeat=5)
    return wall / 100 * 1e6, cpu / 100 * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stages", "-P", type=int, default=64, help="pipeline ranks p")
    parser.add_argument("--microbatches", "-M", type=int, default=512)
    parser.add_argument("--lowering", action="store_true", help="also time add_send_recv and the lowered simulation")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is shown (default 3)")
    args = parser.parse_args()
    p, m, rep = args.stages, args.microbatches, args.repeat
    print(f"p={p} ranks, m={m} microbatches, default chunks per schedule, best of {rep}")
    wall_us, cpu_us = calibration_us()
    print(f"calibration: sum(range(10**4)) takes {wall_us:.0f} us wall, {cpu_us:.0f} us CPU "
          "(compare between runs: a busy machine shows a higher figure)")
    header = (f"{'schedule':14s} {'v':>2s} {'actions':>8s} {'generate':>9s} {'validate':>9s} {'simulate':>9s} "
              f"{'gen+sim':>8s} {'(cpu)':>7s}")
    if args.lowering:
        header += f" {'lower':>8s} {'sim lowered':>11s}"
    print(header)
    for name in schedule_names():
        v = get_schedule_info(name).default_chunks
        schedule, t_gen, c_gen = timed(generate_schedule, name, p, m, repeat=rep)
        _, t_check, _ = timed(check_structure, schedule, repeat=rep)
        result, t_sim, c_sim = timed(simulate_schedule, schedule, repeat=rep)  # includes its own static checks
        n_actions = sum(len(a) for a in schedule.values())
        row = (f"{name:14s} {v:2d} {n_actions:8d} {t_gen:8.3f}s {t_check:8.3f}s {t_sim:8.3f}s "
               f"{t_gen + t_sim:7.3f}s {c_gen + c_sim:6.3f}s")
        if args.lowering:
            lowered, t_low, _ = timed(add_send_recv, schedule)
            _, t_sim_low, _ = timed(simulate_schedule, lowered)
            row += f" {t_low:7.3f}s {t_sim_low:10.3f}s"
        print(row + f"   bubble/ideal {result.bubble_vs_ideal:.4f}")


if __name__ == "__main__":
    main()
