"""Rank function running several demo plans of one world size in one launch."""
from paddle_ext.demo.train import train_rank


def run_plans(plans, steps, schedule):
    out = {}
    for plan in plans:
        try:
            out[plan] = train_rank({"plan": plan, "steps": steps, "schedule": schedule})["losses"]
        except Exception as exc:  # noqa: BLE001 - report which plan failed, keep the others
            out[plan] = f"{type(exc).__name__}: {exc}"
    return out
