import poetrydemo  # noqa: F401
