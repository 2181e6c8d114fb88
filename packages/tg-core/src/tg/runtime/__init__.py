"""Host-side helpers that device runtimes share (tg.runtime.cpu: running a kernel's slices on CPU threads)."""
