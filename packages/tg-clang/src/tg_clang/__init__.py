"""tg-clang: the CLANG device for tg (C source compiled by clang into a shared object, called through cffi)."""
__version__ = "0.1.0"
