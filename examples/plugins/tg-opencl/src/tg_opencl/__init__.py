"""tg-opencl: an OpenCL device for tg, an example of a device package built outside tg's repository."""
