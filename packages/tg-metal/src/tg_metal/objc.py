"""The Objective-C runtime through ctypes: just enough to drive Metal.framework without pyobjc.

A message is `objc_msgSend(receiver, selector, args...)`, called through a function pointer cast to the method's own C
signature: on arm64 a variadic call passes arguments differently from a fixed one, so every selector tg sends is
declared once in SIGNATURES with its return and argument types (MTLSize structs by value, which libffi passes as the
platform's ABI wants; no method tg calls returns a struct, so objc_msgSend_stret is never needed). `send` refuses a
selector that is not declared. Everything here is lazy: importing this module on Linux loads nothing.
"""
from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

LIBOBJC = "/usr/lib/libobjc.A.dylib"
METAL = "/System/Library/Frameworks/Metal.framework/Metal"
# MTLCreateSystemDefaultDevice finds no GPU in a process that hasn't loaded CoreGraphics (a command-line Python)
COREGRAPHICS = "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics"
LIBSYSTEM = "/usr/lib/libSystem.B.dylib"

id_t = ctypes.c_void_p
NSUInteger = ctypes.c_ulong


class MTLSize(ctypes.Structure):
  _fields_ = [("width", NSUInteger), ("height", NSUInteger), ("depth", NSUInteger)]


# selector -> (return type, argument types after self and _cmd), as Apple's headers declare the methods
SIGNATURES: dict[str, tuple[Any, tuple[Any, ...]]] = {
  # NSObject, NSString, NSError
  "alloc": (id_t, ()), "init": (id_t, ()), "new": (id_t, ()), "retain": (id_t, ()), "release": (None, ()),
  "initWithUTF8String:": (id_t, (ctypes.c_char_p,)), "UTF8String": (ctypes.c_char_p, ()),
  "localizedDescription": (id_t, ()),
  # MTLDevice
  "name": (id_t, ()), "newCommandQueue": (id_t, ()), "newBufferWithLength:options:": (id_t, (NSUInteger, NSUInteger)),
  "newLibraryWithSource:options:error:": (id_t, (id_t, id_t, ctypes.POINTER(id_t))),
  "newLibraryWithData:error:": (id_t, (id_t, ctypes.POINTER(id_t))),
  "newComputePipelineStateWithFunction:error:": (id_t, (id_t, ctypes.POINTER(id_t))),
  "maxThreadgroupMemoryLength": (NSUInteger, ()),
  "supportsFamily:": (ctypes.c_bool, (ctypes.c_long,)),
  # MTLCompileOptions
  "setFastMathEnabled:": (None, (ctypes.c_bool,)),
  # MTLLibrary, MTLComputePipelineState
  "newFunctionWithName:": (id_t, (id_t,)), "maxTotalThreadsPerThreadgroup": (NSUInteger, ()),
  # MTLBuffer
  "contents": (ctypes.c_void_p, ()), "length": (NSUInteger, ()),
  # MTLCommandQueue, MTLCommandBuffer
  "commandBuffer": (id_t, ()), "computeCommandEncoder": (id_t, ()), "commit": (None, ()), "waitUntilCompleted": (None, ()),
  "status": (NSUInteger, ()), "error": (id_t, ()), "GPUStartTime": (ctypes.c_double, ()), "GPUEndTime": (ctypes.c_double, ()),
  # MTLComputeCommandEncoder
  "setComputePipelineState:": (None, (id_t,)), "setBuffer:offset:atIndex:": (None, (id_t, NSUInteger, NSUInteger)),
  "setBytes:length:atIndex:": (None, (ctypes.c_void_p, NSUInteger, NSUInteger)),
  "dispatchThreadgroups:threadsPerThreadgroup:": (None, (MTLSize, MTLSize)), "endEncoding": (None, ()),
}


class ObjCError(RuntimeError):
  pass


def is_macos() -> bool:
  return sys.platform == "darwin"


@functools.cache
def libobjc() -> ctypes.CDLL:
  lib = ctypes.CDLL(LIBOBJC)
  lib.objc_getClass.restype, lib.objc_getClass.argtypes = id_t, [ctypes.c_char_p]
  lib.sel_registerName.restype, lib.sel_registerName.argtypes = id_t, [ctypes.c_char_p]
  lib.objc_autoreleasePoolPush.restype, lib.objc_autoreleasePoolPush.argtypes = ctypes.c_void_p, []
  lib.objc_autoreleasePoolPop.restype, lib.objc_autoreleasePoolPop.argtypes = None, [ctypes.c_void_p]
  return lib


@functools.cache
def selector(name: str) -> int:
  sel = libobjc().sel_registerName(name.encode())
  if not sel:
    raise ObjCError(f"sel_registerName({name!r}) failed")
  return int(sel)


@functools.cache
def objc_class(name: str) -> int:
  cls = libobjc().objc_getClass(name.encode())
  if not cls:
    raise ObjCError(f"no Objective-C class {name} (is its framework loaded?)")
  return int(cls)


def prototype(sel: str) -> Any:
  """The ctypes function type objc_msgSend is cast to for `sel`: (self, _cmd, *args) -> ret."""
  if sel not in SIGNATURES:
    raise ObjCError(f"selector {sel!r} has no declared signature (tg_metal.objc.SIGNATURES)")
  ret, args = SIGNATURES[sel]
  return ctypes.CFUNCTYPE(ret, id_t, id_t, *args)


@functools.cache
def _msgsend(sel: str) -> Any:
  return prototype(sel)(ctypes.cast(libobjc().objc_msgSend, ctypes.c_void_p).value)


def send(receiver: int | None, sel: str, *args: Any) -> Any:
  """[receiver sel:args...]"""
  if not receiver:
    raise ObjCError(f"message {sel} sent to nil")
  return _msgsend(sel)(receiver, selector(sel), *args)


def nsstring(s: str) -> int:
  """A new NSString (owned: release it)."""
  return int(send(send(objc_class("NSString"), "alloc"), "initWithUTF8String:", s.encode()))


def to_str(nsstr: int | None) -> str:
  if not nsstr:
    return ""
  b = send(nsstr, "UTF8String")
  return b.decode(errors="replace") if b else ""


def error_text(err: int | None) -> str:
  """An NSError's localizedDescription."""
  return to_str(send(err, "localizedDescription")) if err else "(no NSError)"


class AutoreleasePool:
  """`with AutoreleasePool():` around calls that return autoreleased objects (commandBuffer, computeCommandEncoder): a
  command-line process has no run loop draining a pool for it."""

  def __enter__(self) -> AutoreleasePool:
    self.pool = libobjc().objc_autoreleasePoolPush()
    return self

  def __exit__(self, *exc: object) -> None:
    libobjc().objc_autoreleasePoolPop(self.pool)


@functools.cache
def metal() -> ctypes.CDLL:
  try:
    ctypes.CDLL(COREGRAPHICS)
  except OSError:
    pass
  lib = ctypes.CDLL(METAL)
  lib.MTLCreateSystemDefaultDevice.restype, lib.MTLCreateSystemDefaultDevice.argtypes = id_t, []
  return lib


@functools.cache
def libsystem() -> ctypes.CDLL:
  lib = ctypes.CDLL(LIBSYSTEM)
  # dispatch_data_create(buffer, size, queue, destructor): with the default destructor (NULL) the bytes are copied
  lib.dispatch_data_create.restype = id_t
  lib.dispatch_data_create.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p]
  return lib
