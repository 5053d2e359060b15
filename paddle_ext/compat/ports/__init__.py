"""Ports of Paddle internals: each binds one corner of Paddle (conversion, registries, SPMD
rules, dispatch handles, the static Engine, pipelining) behind paddle-ext's own functions."""
