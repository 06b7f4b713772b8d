"""What the benchmarks print about the machine they ran on (BENCH.md asks for the CPU model).

Imported by the benchmark scripts as a sibling module (`python benchmarks/<name>.py`).
"""

import platform


def cpu_model() -> str:
  """The CPU's model name from /proc/cpuinfo, else what `platform` knows."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown"
