"""paddle-ext: rules, reshards and pipeline schedules that work inside Paddle's semi-auto parallel."""
__version__ = "0.1.0"
