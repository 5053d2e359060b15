"""The named, revertible fixes ``paddle_ext.install()`` applies to Paddle (the table: :mod:`.table`)."""
