"""The episode core: what one tool-use episode is, how its text is marked, how it is encoded.

`Episode`, `Action` and the `Task` protocol; the call syntaxes (`SYNTAXES`: the project's
markers, JSON in `<tool_call>` tags, Llama-3.1 JSON) and `advance` (interpret one generated
segment in the episode's syntax, run its tool call, return the observation); the formats that
turn an episode into token ids (`MarkerFormat`, the default, and `ChatFormat`, a model's own
chat template with tools); one `encode` of an episode to tokens and `loss_mask`, and one
`trim_to_longest` of padded batches. Rollouts, learners, preference data, experts, rewards and
replay all use these. Host code.
"""

from rlagents.episodes._core import Action
from rlagents.episodes._core import advance
from rlagents.episodes._core import ANSWER_CLOSE
from rlagents.episodes._core import ANSWER_OPEN
from rlagents.episodes._core import BOS
from rlagents.episodes._core import CALL_CLOSE
from rlagents.episodes._core import CALL_OPEN
from rlagents.episodes._core import end_unanswered
from rlagents.episodes._core import MARKERS
from rlagents.episodes._core import STOP_MARKERS
from rlagents.episodes._core import EOS
from rlagents.episodes._core import Episode
from rlagents.episodes._core import OBS_CLOSE
from rlagents.episodes._core import OBS_OPEN
from rlagents.episodes._core import play
from rlagents.episodes._core import observation_text
from rlagents.episodes._core import prompt_text
from rlagents.episodes._core import Task
from rlagents.episodes._formats import ChatFormat
from rlagents.episodes._formats import ChatSettings
from rlagents.episodes._formats import check_chat_template
from rlagents.episodes._formats import DEFAULT_SYSTEM_PROMPT
from rlagents.episodes._formats import detect_syntax
from rlagents.episodes._formats import FormatError
from rlagents.episodes._formats import FORMATS
from rlagents.episodes._formats import MarkerFormat
from rlagents.episodes._syntax import call_syntax
from rlagents.episodes._syntax import CallSyntaxError
from rlagents.episodes._syntax import CHAT_SYNTAXES
from rlagents.episodes._syntax import Reading
from rlagents.episodes._syntax import rewrite_segment
from rlagents.episodes._syntax import SYNTAXES
from rlagents.episodes._syntax import tool_schema
from rlagents.episodes._encode import completion_pieces
from rlagents.episodes._encode import completion_text
from rlagents.episodes._encode import encode
from rlagents.episodes._encode import encode_id_pieces
from rlagents.episodes._encode import encode_pieces
from rlagents.episodes._encode import encode_text
from rlagents.episodes._encode import EncodeError
from rlagents.episodes._encode import episode_pieces
from rlagents.episodes._encode import RolloutBatch
from rlagents.episodes._encode import sequence_lengths
from rlagents.episodes._encode import stack_episodes
from rlagents.episodes._encode import trim_to_longest


__all__ = [
    "ANSWER_CLOSE", "ANSWER_OPEN", "BOS", "CALL_CLOSE", "CALL_OPEN", "EOS", "MARKERS",
    "OBS_CLOSE", "OBS_OPEN", "STOP_MARKERS",
    "CHAT_SYNTAXES", "DEFAULT_SYSTEM_PROMPT", "FORMATS", "SYNTAXES",
    "Action", "CallSyntaxError", "ChatFormat", "ChatSettings", "EncodeError", "Episode",
    "FormatError", "MarkerFormat", "Reading", "RolloutBatch", "Task",
    "advance", "call_syntax", "check_chat_template", "completion_pieces", "completion_text",
    "detect_syntax", "encode", "encode_id_pieces", "encode_pieces", "encode_text",
    "end_unanswered", "episode_pieces", "observation_text", "play", "prompt_text",
    "rewrite_segment", "sequence_lengths", "stack_episodes", "tool_schema", "trim_to_longest",
]
