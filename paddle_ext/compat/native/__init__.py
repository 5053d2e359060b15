"""paddle-ext's C++ pieces (sources in ``paddle_ext/csrc/``): the builder, the PLT hooks, the compiled
dispatch key."""
