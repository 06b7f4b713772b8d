r"""Runs one Python snippet through the review gate, asking a person on the terminal first.

    python -m experiments.review --code="print(sum(range(10)))"

The Python runner's cost tag ("high") is gated, so nothing runs until you answer `y`;
any other answer is a refusal, shown as the observation the agent would read. In training
there is no reviewer and gated calls are denied (`guardrails.ReviewGate()`).
"""

import json

from absl import app
from absl import flags
import numpy as np

from rlagents import guardrails
from rlagents import tools

_CODE = flags.DEFINE_string("code", "print('hello from the sandbox')",
                            "The Python snippet to run in the sandbox once you approve it.")


def main(argv):
  del argv
  runner = tools.PythonRunnerTool()
  gate = guardrails.ReviewGate(approve=guardrails.interactive_approver())
  box = tools.ToolBox([runner], guard=guardrails.Guard(
      guardrails.AllowListPolicy({"python": None}), gate))
  result = box.execute(f"python({json.dumps({'code': _CODE.value})})", np.random.default_rng(0))
  print(f"[{result.guardrail}]")
  print(result.observation)


if __name__ == "__main__":
  app.run(main)
