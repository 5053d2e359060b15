"""paddle-ext's pipeline schedules as Paddle static (PIR) pipeline passes."""
