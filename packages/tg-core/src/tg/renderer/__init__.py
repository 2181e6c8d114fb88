"""Renderer: turns a linearized kernel (a list of UOps) into source for one device.

A renderer also declares what its device can do; core reads these capabilities and never the
device's name. A plugin subclasses Renderer (or CStyleLanguage for C-family languages).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tg.codegen.tensor_core import TensorCore
from tg.codegen.uops import UOp
from tg.dtype import DType, dtypes
from tg.ops import UnaryOps
from tg.renderer.cpu_target import CPUTarget
from tg.shape.symbolic import Variable, sint, sym_infer


class Renderer:
  # The capabilities, grouped as docs/capabilities.md lists them (type, default, meaning, what core does, each
  # in-tree renderer's values). Core reads these and never the device's name.

  # ---- identity ----
  device: str = ""
  suffix: str = ""                         # kernel name suffix, for DEBUG output

  # ---- workgroups and threads ----
  # True: output axes are hardware indices (SPECIAL gidx = workgroup index, lidx = thread in the workgroup) and
  # Program.global_size / local_size are the launch's workgroup counts / workgroup size per dim (x, y, z);
  # without LOCAL opts each workgroup is one thread. False: output axes are loops (CPUs).
  global_ids: bool = False
  global_max: tuple[int, ...] | None = None  # max workgroup count per launch dim; its length is the number of dims
  has_local: bool = False                  # workgroups with shared memory and barriers: LOCAL/GROUP/GROUPTOP opts
  local_max: tuple[int, ...] = (1024, 1024, 64)  # max workgroup size per dim
  local_max_threads: int = 1024            # max threads in one workgroup
  shared_max: int = 48 * 1024              # bytes of DEFINE_LOCAL memory one kernel may use

  # ---- vectors ----
  # vector_bytes: the widest vector the device has a type for (0: no vectors); the kernel optimizer then
  # lowers one UPCAST axis as vector values (see tg.codegen.lowerer.Lowerer), of at most vector_width(dt) lanes.
  vector_bytes: int = 0
  vector_dtypes: frozenset[DType] | None = None  # the scalar dtypes that have vector types (None: all but bool)
  vector_align: bool = False  # a vector LOAD/STORE needs an element index that is a multiple of its lane count
  # a vector LOAD may have a mask (a VECTORIZE of one bool per lane, the only bool vector core makes): masked-off
  # lanes read nothing and get the alternative value. Without it, such lanes are gathered one by one
  masked_vector_loads: bool = False

  # ---- memory ----
  # bytes a load may read before the start and after the end of a buffer, because the device's allocator keeps them
  # readable (HostAllocator's slack). From a vector's size on, a masked vector LOAD may read the whole vector
  # (whenever any lane is valid its lanes lie within that distance of the buffer) and then zero the masked-off
  # lanes: no branch and no lane-by-lane gather at a padded image's edges
  overread_bytes: int = 0

  # ---- dtypes ----
  # dtypes the device computes in directly; others are emulated by core (bfloat16 through uint16 bits)
  unsupported_dtypes: frozenset[DType] = frozenset()
  # dtypes the device can't hold in a kernel at all (e.g. WGSL has no float64 or int64): a kernel that needs one
  # fails to lower with an error that names the dtype and the device; see tg.device.is_dtype_supported
  missing_dtypes: frozenset[DType] = frozenset()

  # ---- math ----
  # UnaryOps (EXP2, LOG2, SIN) the device has no instruction for: core expands them into basic ALU ops
  # (tg.codegen.transcendental) before linearizing, so render() never sees them
  transcendental_fallback: frozenset[UnaryOps] = frozenset()
  # True: a sum of float32/float64 products accumulates through TernaryOps.MULACC, a*b+c in one instruction (the
  # linearizer makes it; nothing else fuses). Render it as the device's fused multiply-add
  fused_mulacc: bool = False
  # False: the device's compiler may fuse and reorder float math, divide to a few ulp and assume no NaN or infinity
  # (WGSL allows all three), so results can differ from strict IEEE in the last bits and around NaN/inf
  strict_float: bool = True
  # tensor-core instructions the renderer can emit for WMMA uops (tg.codegen.tensor_core): enables the TC opt
  tensor_cores: tuple[TensorCore, ...] = ()

  # ---- CPU tuning ----
  # the CPU the kernels run on (tg.renderer.cpu_target.CPUTarget: vector width and registers, FMA, caches), which the
  # CPU heuristics derive their tiles from (tg.codegen.heuristics.cpu); None: a generic CPU of `vector_bytes` vectors
  cpu_target: CPUTarget | None = None
  # > 0: a large matmul-like sum (a matmul, a conv: tg.engine.packing) reads copies of its operands packed in panels
  # of this many elements along each operand's own output axis (A's rows, B's columns, a conv weight's output
  # channels), stored innermost after the reduce axes: a register tile that wide then reads each operand as one
  # sequential stream instead of a strided one per row (CPUs: their caches and TLBs then serve every load). The copies
  # are ordinary kernels; sums below tg.lazy.PACK_MIN_MACS multiply-adds, whose operands stay in cache, are not packed
  # (but those of PACK_MIN_MACS_LONG or more whose reads span cpu_target's L2: see tg.engine.packing)
  matmul_panel: int = 0
  # > 0: when both operands are packed, the panel of the one whose own axis is not the output's innermost (A's rows)
  # is this many elements instead: the rows of the register tile, where matmul_panel is its vector columns (0: the same)
  matmul_panel_rows: int = 0
  # > 0: the run of elements per output one kernel of a split reduction adds (tg.lazy.LazyBuffer._tree_reduce), chosen so
  # that each of the kernel's independent accumulators adds only a short chain (a float sum's error grows with its
  # chains' length); 0: tg.lazy.SUM_LEAF (8192, for GPUs, whose kernels group a run's threads)
  reduce_leaf: int = 0

  def vector_width(self, dt: DType) -> int:
    """The most lanes a vector of scalar dtype `dt` may have here (1: no vectors of it)."""
    ok = dt != dtypes.bool if self.vector_dtypes is None else dt in self.vector_dtypes
    return max(1, self.vector_bytes // dt.itemsize) if ok else 1

  def keeps_vector(self, u: UOp) -> bool:
    """Whether this vector ALU/CAST/BITCAST/REDUCE is rendered as one vector operation. Core splits the others
    into one scalar operation per lane (tg.codegen.devectorize), and those on dtypes without vectors here
    (`vector_width`) and transcendentals the renderer has fallbacks for; vector LOAD/STORE, VECTORIZE and GEP stay."""
    return True

  def render(self, name: str, uops: list[UOp]) -> str:
    """Source code for one kernel called `name` whose body is the linear program `uops`."""
    raise NotImplementedError(type(self))


@dataclass(frozen=True)
class Program:
  """One rendered kernel: everything the runtime needs to launch it.

  Its parameters are its schedule item's buffers, all of them in order (parameter i is buffer i, `data<i>`, whether
  the kernel reads it or not: core keeps a DEFINE_GLOBAL for each), then the symbolic sizes `vars`. Every caller
  (CompiledRunner, BEAM's timing, the graphs) passes exactly `buf_count` buffers, then `vars`' values."""
  name: str
  src: str
  device: str
  global_size: tuple[sint, ...] = ()
  local_size: tuple[sint, ...] = ()
  vars: tuple[Variable, ...] = ()           # symbolic sizes, passed after the buffers in this order
  buf_count: int = 0                        # buffer parameters: the schedule item's buffers 0..buf_count-1
  op_estimate: sint = 0
  mem_estimate: sint = 0
  uops: list[UOp] = field(default_factory=list, compare=False, repr=False)

  @property
  def function_name(self) -> str:
    return self.name

  def launch_dims(self, var_vals: dict[Variable, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(sym_infer(s, var_vals) for s in self.global_size), tuple(sym_infer(s, var_vals) for s in self.local_size)


def is_emulated(renderer: Renderer, dt: DType) -> bool:
  return dt.scalar() in renderer.unsupported_dtypes and dt.scalar() == dtypes.bfloat16
