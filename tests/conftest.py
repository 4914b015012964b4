"""One TVM thread count for the whole test process: TVM's pool starts with the first kernel that
runs and keeps its size, and ``graphselect.optimize`` refuses to time under a pool whose size
differs from the thread count it files records under. Without this, a tests/tvm kernel run
before the first optimize call would start the pool at TVM's own default (1 on a 2-vCPU VM)."""
import os

from graphselect.target import default_threads

os.environ.setdefault("TVM_NUM_THREADS", str(default_threads()))
