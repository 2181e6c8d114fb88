"""Setup for tg-core's own tests."""
import signal

# A runner started in the background by a shell without job control (`.ci/run &` from a script) ignores SIGINT, and
# every process it starts inherits that: a child Python then never raises KeyboardInterrupt, and the tests that send
# Ctrl-C to a child (reliability/test_interrupts.py, test_realize_faults.py, test_streams.py) fail as "the Ctrl-C was
# lost". With a handler here (not an ignore), the children they start get the default one back at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
  signal.signal(signal.SIGINT, signal.default_int_handler)
