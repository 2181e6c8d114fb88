"""tg-metal: the METAL device for tg (Metal Shading Language kernels run through Metal.framework on macOS; METAL_MOCK=1
checks them with clang++ and runs them on the CPU)."""
__version__ = "0.1.0"
