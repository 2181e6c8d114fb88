"""A device plugin whose import fails, as one with a missing native library would."""
raise ImportError("libtoy.so: cannot open shared object file")
