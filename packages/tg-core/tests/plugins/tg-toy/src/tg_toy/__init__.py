"""A toy tg device: its own renderer (a tiny text format), compiler, allocator and runtime."""
