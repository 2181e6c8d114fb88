"""MetalProgram: one loaded kernel, dispatched with tg's buffers ([[buffer(i)]]) and symbolic sizes (setBytes, after
the buffers) as its arguments."""
from __future__ import annotations

from tg_metal.runtime import Driver, Launch, MetalBinary, launch_dims


class MetalProgram:
  def __init__(self, driver: Driver, name: str, lib: bytes) -> None:
    self.driver, self.name = driver, name
    self.binary = MetalBinary.unpack(lib)
    self.fn = driver.function(self.binary, name)

  def launch(self, bufs: tuple, global_size: tuple[int, ...], local_size: tuple[int, ...], vals: tuple[int, ...]) -> Launch:  # type: ignore[type-arg]
    grid, block = launch_dims(global_size, local_size)
    return Launch(self.fn, tuple(bufs), tuple(vals), grid, block)

  def __call__(self, *bufs: object, global_size: tuple[int, ...] = (), local_size: tuple[int, ...] = (),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    return self.driver.run([self.launch(bufs, global_size, local_size, vals)], wait)
