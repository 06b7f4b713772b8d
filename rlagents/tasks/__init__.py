"""Task suites with verifiers and disjoint splits (host code).

The TFDS builders live in their own modules (`rlagents.tasks.calculator_tfds`) so that importing
this package does not import TFDS.
"""

from rlagents.tasks.calculator import CalculatorSuiteConfig
from rlagents.tasks.calculator import CalculatorTask
from rlagents.tasks.calculator import generate_suite
from rlagents.tasks.calculator import is_correct
from rlagents.tasks.calculator import load_split
from rlagents.tasks.calculator import parse_answer
from rlagents.tasks.calculator import SPLITS

__all__ = [
    "CalculatorSuiteConfig",
    "CalculatorTask",
    "SPLITS",
    "generate_suite",
    "is_correct",
    "load_split",
    "parse_answer",
]
