"""Task suites with verifiers and disjoint splits, and the suite registry (host code).

The TFDS builders live in their own modules (`rlagents.tasks.calculator_tfds`) so that importing
this package does not import TFDS.
"""

from rlagents.tasks.calculator import CalculatorSuiteConfig
from rlagents.tasks.calculator import CalculatorTask
from rlagents.tasks.calculator import generate_suite
from rlagents.tasks.calculator import is_correct
from rlagents.tasks.calculator import parse_answer
from rlagents.tasks.calculator import proposal_grammar
from rlagents.tasks.calculator import SPLITS
from rlagents.tasks._proposals import InvalidProposal
from rlagents.tasks._proposals import ProposalChecker
from rlagents.tasks._proposals import ProposalGrammar
from rlagents.tasks._proposals import ProposerTask
from rlagents.tasks._proposals import REJECTIONS
from rlagents.tasks._proposals import UnsolvableProposal
from rlagents.tasks._proposals import Verdict
from rlagents.tasks._registry import EVAL_SPLIT_NAMES
from rlagents.tasks._registry import is_jax_native
from rlagents.tasks._registry import register_suite
from rlagents.tasks._registry import registered_suites
from rlagents.tasks._registry import suite_factory
from rlagents.tasks._registry import SuiteError
from rlagents.tasks._registry import TaskSuite
from rlagents.tasks._splits import load_split

__all__ = [
    "EVAL_SPLIT_NAMES",
    "InvalidProposal",
    "ProposalChecker",
    "ProposalGrammar",
    "ProposerTask",
    "REJECTIONS",
    "UnsolvableProposal",
    "Verdict",
    "SuiteError",
    "TaskSuite",
    "is_jax_native",
    "register_suite",
    "registered_suites",
    "suite_factory",
    "CalculatorSuiteConfig",
    "CalculatorTask",
    "SPLITS",
    "generate_suite",
    "is_correct",
    "load_split",
    "parse_answer",
    "proposal_grammar",
]
