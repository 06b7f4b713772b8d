"""Test-wide setup. Eight host CPU devices, so pmap and sharding tests run without accelerators.

XLA reads the flag when the backend starts, so it must be set before any test touches a device.
An explicit device count already in XLA_FLAGS is kept.
"""

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + " --xla_force_host_platform_device_count=8").strip()
